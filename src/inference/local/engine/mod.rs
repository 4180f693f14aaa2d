//! The mistral.rs engine itself (the `local` feature): a GGUF file loaded in-process, its
//! runners (serial with the prefix cache, or batched), requests built with their constraints and
//! context check, and a [`LocalModel`]'s load on first use, shared between models of one file.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use mistralrs::core::{
    AutoDeviceMapParams, Constraint, DefaultSchedulerMethod, DeviceMapSetting, GGUFLoaderBuilder,
    GGUFSpecificConfig, MistralRsBuilder, ModelDType, Pipeline, SchedulerConfig, TokenSource,
};
use mistralrs::{Device, Function, Model, RequestBuilder, Tool, ToolChoice, ToolType};
use tokio::sync::{OnceCell, mpsc};

mod translate;

use super::{LocalModel, LocalSettings};
use crate::core::step_clock::StepClock;
use crate::core::{Failure, FailureCode, TokenUsage};
use crate::inference::{Engine, EngineFuture, Grammar, ModelInfo, Request, Response, TokenSink};
use crate::model_store::{LocalSource, Notice, gguf};
use translate::{add_message, compact_json, engine_failure, sampling, stream_answer, to_response};

/// How to load a local model.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The GGUF file.
    pub path: PathBuf,
    pub settings: LocalSettings,
}

/// A loaded local model, used with one set of settings.
pub struct LocalEngine {
    weights: Arc<Weights>,
    settings: LocalSettings,
}

/// What loading a model file makes: the mistral.rs runner and what is read from the vocabulary.
/// Only the file and `max_batch` (the scheduler's size) go into it; the other settings apply per
/// request, so models that differ only in them share one load.
pub(super) struct Weights {
    runner: Runner,
    name: String,
    /// The end markers of this model's vocabulary that llguidance may force once a grammar is
    /// complete; they stop decoding (see [`GRAMMAR_END_MARKERS`]).
    grammar_ends: Vec<String>,
    /// Counts the tokens of a text with the model's tokenizer (none: the model has no tokenizer).
    count_tokens: Option<TokenCounter>,
    /// The context the model was trained for, as its GGUF file says.
    pub(super) context_length: Option<u64>,
}

/// A model file's load, shared by every [`LocalModel`] over the same source and `max_batch`.
type SharedLoad = OnceCell<Result<Arc<Weights>, Failure>>;

/// The loads of the local models in use, each shared by every model of its file and
/// `max_batch`; the session owns one for all its plans (a served plan reloaded, a judge, a
/// sub-plan), so a file is read once.
#[derive(Default)]
pub struct LocalLoads {
    /// Each load by its source and `max_batch`; a load no model uses any more is forgotten.
    loads: Mutex<Vec<(String, Weak<SharedLoad>)>>,
}

/// One model's way to its file's load: the load it shares, and where it announces a pull or a
/// load.
pub(super) struct Load {
    shared: Arc<SharedLoad>,
    notice: Notice,
}

impl LocalLoads {
    /// The load of the models known by `key` (their source and `max_batch`): the one still in
    /// use, else a new one.
    pub(super) fn share(&self, key: String, notice: Notice) -> Load {
        let mut loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        loads.retain(|(_, load)| load.strong_count() > 0);
        let found = loads
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, load)| load.upgrade());
        let shared = found.unwrap_or_else(|| {
            let shared = Arc::default();
            loads.push((key, Arc::downgrade(&shared)));
            shared
        });
        Load { shared, notice }
    }
}

impl Load {
    /// The context the model was trained for, once its file is loaded.
    pub(super) fn trained(&self) -> Option<u64> {
        match self.shared.get() {
            Some(Ok(weights)) => weights.context_length,
            _ => None,
        }
    }
}

/// This build runs local models: nothing is missing.
pub fn missing_local_engine(_model: &str) -> Option<Failure> {
    None
}

/// Runs `request` on `model`, loading its file first if needed. A call that waited for the load
/// (the first of the process, or one that came while another loaded it) says how long in its
/// timings' `load`, so the caller keeps it out of the call's own duration and rate.
pub(super) fn infer(model: &LocalModel, request: Request) -> EngineFuture<'_> {
    Box::pin(async move {
        let (engine, load) = model.engine(&request.context.clock).await?;
        let mut response = engine.infer(request).await?;
        response.timings.load = load;
        Ok(response)
    })
}

/// Runs `request` on `model` streamed to `sink`, loading its file first if needed (its wait
/// for the load said as [`infer`] says it).
pub(super) fn infer_streaming(
    model: &LocalModel,
    request: Request,
    sink: TokenSink,
) -> EngineFuture<'_> {
    Box::pin(async move {
        let (engine, load) = model.engine(&request.context.clock).await?;
        let mut response = engine.infer_streaming(request, sink).await?;
        response.timings.load = load;
        Ok(response)
    })
}

type TokenCounter = Box<dyn Fn(&str) -> usize + Send + Sync>;

type SharedPipeline = Arc<tokio::sync::Mutex<dyn Pipeline + Send + Sync>>;

/// How requests reach mistral.rs.
enum Runner {
    /// All at once; its scheduler batches up to `max_batch` sequences. Prefix cache off.
    Batched(Model),
    /// One at a time, prefix cache on.
    Serial(tokio::sync::Mutex<SerialRunner>),
}

/// A runner with the prefix cache on, and what its cache holds.
///
/// On the CPU mistral.rs never evicts a prefix cache entry (it evicts only entries on an
/// accelerator), and each finished request leaves one: the runner is started afresh over the same
/// loaded model once the entries hold [`PREFIX_CACHE_TOKENS`], which bounds the memory.
struct SerialRunner {
    pipeline: SharedPipeline,
    model: Model,
    /// KV-cache tokens the prefix cache holds, in whole blocks.
    cached_tokens: usize,
}

/// The most KV-cache tokens the prefix cache holds before its runner is restarted (about
/// 400 MB for the embedded model's 24 layers with F32 activations).
const PREFIX_CACHE_TOKENS: usize = 16_384;

/// mistral.rs allocates a sequence's KV cache in blocks of this many tokens.
const KV_BLOCK_TOKENS: usize = 512;

/// The right to send a request to mistral.rs: shared for a batched runner, exclusive for a
/// serial one.
enum Turn<'a> {
    Shared(&'a Model),
    Exclusive(tokio::sync::MutexGuard<'a, SerialRunner>),
}

impl Turn<'_> {
    fn model(&self) -> &Model {
        match self {
            Turn::Shared(model) => model,
            Turn::Exclusive(runner) => &runner.model,
        }
    }

    /// Counts what the finished request left in the prefix cache.
    fn finished(&mut self, usage: &TokenUsage) {
        if let Turn::Exclusive(runner) = self {
            let tokens = usize::try_from(usage.total()).unwrap_or(usize::MAX);
            let blocks = tokens.div_ceil(KV_BLOCK_TOKENS).max(1);
            runner.cached_tokens = runner
                .cached_tokens
                .saturating_add(blocks.saturating_mul(KV_BLOCK_TOKENS));
        }
    }
}

/// A mistral.rs runner over a loaded model, its scheduler sized `max_batch`.
async fn start_runner(
    pipeline: SharedPipeline,
    max_batch: NonZeroUsize,
    prefix_cache: bool,
) -> Model {
    let scheduler = SchedulerConfig::DefaultScheduler {
        method: DefaultSchedulerMethod::Fixed(max_batch),
    };
    let runner = MistralRsBuilder::new(pipeline, scheduler, false, None)
        .with_no_prefix_cache(!prefix_cache)
        .build()
        .await;
    Model::new(runner)
}

/// Tokens a chat template adds around each message (role markers, separators), roughly.
const TEMPLATE_TOKENS_PER_MESSAGE: usize = 8;

/// The tokens llguidance takes as end-of-sequence (toktrie_hf_tokenizers picks the first of
/// these that the vocabulary has). Once a constraint is satisfied llguidance allows only that
/// token, but mistral.rs stops only on the GGUF's own EOS, which can differ (Qwen: `<|im_end|>`
/// vs `<|endoftext|>`): without these as stop tokens a constrained answer ran on to max_tokens.
const GRAMMAR_END_MARKERS: [&str; 5] = [
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
    "<eos>",
];

fn load_failure(path: &Path, error: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::InferenceModelUnavailable,
        format!("mistral.rs could not load {}: {error}", path.display()),
    )
    .with_help("check the file with `pagantic models list --verify`, or pull it again")
}

impl LocalEngine {
    /// Loads the model (checking the file first, so a bad file is a failure, not a panic).
    pub async fn load(config: &LocalConfig) -> Result<Self, Failure> {
        Ok(LocalEngine {
            weights: Arc::new(Weights::load(&config.path, config.settings.max_batch).await?),
            settings: config.settings.clone(),
        })
    }
}

impl Weights {
    /// Reads the file at `path` into a runner that decodes up to `max_batch` sequences together.
    async fn load(path: &Path, max_batch: usize) -> Result<Self, Failure> {
        let summary = gguf::inspect(path)?;
        let dir = path
            .parent()
            .unwrap_or(Path::new("."))
            .to_string_lossy()
            .into_owned();
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .ok_or_else(|| load_failure(path, "not a file path"))?;
        let path = path.to_path_buf();
        let max_batch = max_batch.max(1);
        // Loading reads ~600 MB and builds the model: keep it off the async threads.
        let pipeline = tokio::task::spawn_blocking(move || {
            let loader = GGUFLoaderBuilder::new(
                None,
                None,
                dir,
                vec![file],
                GGUFSpecificConfig { topology: None },
                false,
                None,
            )
            .build();
            loader.load_model_from_hf(
                None,
                TokenSource::None,
                &ModelDType::F32,
                &Device::Cpu,
                true,
                DeviceMapSetting::Auto(AutoDeviceMapParams::default_text()),
                None,
                None,
            )
        })
        .await
        .map_err(|e| load_failure(&path, e))?
        .map_err(|e| load_failure(&path, e))?;
        let batch: NonZeroUsize = max_batch
            .try_into()
            .map_err(|_| load_failure(&path, "max_batch must be positive"))?;
        let tokenizer = pipeline.lock().await.tokenizer();
        let grammar_ends = tokenizer.as_ref().map_or_else(Vec::new, |tokenizer| {
            GRAMMAR_END_MARKERS
                .iter()
                .filter(|marker| tokenizer.token_to_id(marker).is_some())
                .map(|marker| marker.to_string())
                .collect()
        });
        let count_tokens = tokenizer.map(|tokenizer| {
            Box::new(move |text: &str| {
                tokenizer
                    .encode_fast(text, false)
                    .map_or(text.len() / 4, |encoding| encoding.len())
            }) as TokenCounter
        });
        let runner = if batch == NonZeroUsize::MIN {
            Runner::Serial(tokio::sync::Mutex::new(SerialRunner {
                model: start_runner(Arc::clone(&pipeline), batch, true).await,
                pipeline,
                cached_tokens: 0,
            }))
        } else {
            Runner::Batched(start_runner(pipeline, batch, false).await)
        };
        Ok(Weights {
            runner,
            grammar_ends,
            count_tokens,
            context_length: summary.context_length,
            name: path
                .file_name()
                .map_or_else(|| "local".into(), |f| f.to_string_lossy().into_owned()),
        })
    }
}

impl Weights {
    /// Waits for this runner's turn; a serial runner whose prefix cache is full is restarted
    /// first.
    async fn turn(&self) -> Turn<'_> {
        match &self.runner {
            Runner::Batched(model) => Turn::Shared(model),
            Runner::Serial(runner) => {
                let mut runner = runner.lock().await;
                if runner.cached_tokens >= PREFIX_CACHE_TOKENS {
                    let pipeline = Arc::clone(&runner.pipeline);
                    runner.model = start_runner(pipeline, NonZeroUsize::MIN, true).await;
                    runner.cached_tokens = 0;
                }
                Turn::Exclusive(runner)
            }
        }
    }

    /// Sends one request and waits for its answer.
    async fn answer(&self, builder: RequestBuilder) -> Result<Response, Failure> {
        let mut turn = self.turn().await;
        let response = turn
            .model()
            .send_chat_request(builder)
            .await
            .map_err(engine_failure)
            .map(to_response)?;
        turn.finished(&response.usage);
        Ok(response)
    }

    /// Sends one request and streams its text to `pieces` (which may close early: the request
    /// then still runs to its end, so the turn is not given up while mistral.rs works on it).
    async fn stream(
        &self,
        builder: RequestBuilder,
        pieces: mpsc::UnboundedSender<String>,
    ) -> Result<Response, Failure> {
        let mut turn = self.turn().await;
        let response = stream_answer(turn.model(), builder, pieces).await?;
        turn.finished(&response.usage);
        Ok(response)
    }
}

impl LocalEngine {
    /// Refuses a request that cannot fit in `context_length` (prompt, template and `max_tokens`).
    fn check_context(&self, request: &Request) -> Result<(), Failure> {
        let (Some(limit), Some(count)) = (self.settings.context_length, &self.weights.count_tokens)
        else {
            return Ok(());
        };
        let prompt: usize = request
            .messages
            .iter()
            .map(|m| count(&m.content) + TEMPLATE_TOKENS_PER_MESSAGE)
            .sum();
        let answer = request.max_tokens.unwrap_or(0) as usize;
        if prompt + answer <= limit as usize {
            return Ok(());
        }
        Err(Failure::new(
            FailureCode::InferenceContextExceeded,
            format!(
                "the prompt is about {prompt} tokens and max_tokens {answer}: more than the model's context_length of {limit}"
            ),
        )
        .with_help("shorten the prompt (fewer or shorter retrieved passages), lower max_tokens, or raise context_length"))
    }

    fn build_request(&self, request: &Request) -> Result<RequestBuilder, Failure> {
        self.check_context(request)?;
        let mut builder = RequestBuilder::new();
        for message in &request.messages {
            builder = add_message(builder, message);
        }
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| Tool {
                    tp: ToolType::Function,
                    function: Function {
                        description: Some(t.description.clone()),
                        name: t.name.clone(),
                        parameters: t.parameters.as_object().map(|o| {
                            o.iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect::<HashMap<_, _>>()
                        }),
                    },
                })
                .collect();
            builder = builder.set_tools(tools).set_tool_choice(ToolChoice::Auto);
        }
        if !self.settings.decoder_constraints && request.grammar.is_some() {
            return Err(Failure::new(
                FailureCode::ConstraintGrammarRejected,
                "this model has decoder_constraints off, so a grammar cannot be enforced",
            )
            .with_help("turn decoder_constraints on for the model, or use a `validate` step with a regex rule"));
        }
        let schema = request
            .json_schema
            .as_ref()
            .filter(|_| self.settings.decoder_constraints);
        let constraint = match (&request.grammar, schema) {
            (Some(Grammar::Regex(regex)), _) => Some(Constraint::Regex(regex.clone())),
            (Some(Grammar::Lark(lark)), _) => Some(Constraint::Lark(lark.clone())),
            (None, Some(schema)) => Some(Constraint::JsonSchema(compact_json(schema))),
            (None, None) => None,
        };
        let constrained = constraint.is_some();
        if let Some(constraint) = constraint {
            builder = builder.set_constraint(constraint);
        }
        // The sampler first: it replaces every sampling parameter, the length limit included
        // (setting it after max_len made greedy runs ignore max_tokens, which under a constraint
        // meant decoding forced end tokens up to the context length).
        builder = builder.set_sampling(sampling(request.temperature));
        if let Some(max) = request.max_tokens {
            builder = builder.set_sampler_max_len(max as usize);
        }
        let mut stop = request.stop.clone();
        if constrained {
            stop.extend(self.weights.grammar_ends.iter().cloned());
        }
        if !stop.is_empty() {
            builder = builder.set_sampler_stop_toks(mistralrs::StopTokens::Seqs(stop));
        }
        Ok(builder)
    }
}

impl Engine for LocalEngine {
    /// The request runs in a task of its own: a caller that gives up (a step past its timeout)
    /// does not end a serial runner's turn while mistral.rs still works on the request.
    fn infer(&self, request: Request) -> EngineFuture<'_> {
        Box::pin(async move {
            let builder = self.build_request(&request)?;
            let weights = Arc::clone(&self.weights);
            tokio::spawn(async move { weights.answer(builder).await })
                .await
                .map_err(engine_failure)?
        })
    }

    fn infer_streaming(&self, request: Request, sink: TokenSink) -> EngineFuture<'_> {
        Box::pin(async move {
            let builder = self.build_request(&request)?;
            let weights = Arc::clone(&self.weights);
            let (pieces, mut received) = mpsc::unbounded_channel();
            let answer = tokio::spawn(async move { weights.stream(builder, pieces).await });
            while let Some(piece) = received.recv().await {
                sink(&piece);
            }
            answer.await.map_err(engine_failure)?
        })
    }

    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            name: self.weights.name.clone(),
            engine: "mistralrs",
            constrained_decoding: self.settings.decoder_constraints,
            price: None,
            key: None,
            context_window: self.settings.context_window(self.weights.context_length),
        }
    }
}

impl LocalModel {
    /// The loaded file with this model's settings (loading it on first use), and how long this
    /// caller waited for the load (zero once it is loaded).
    ///
    /// The load runs in a task of its own: a caller that gives up (a step past its timeout, a
    /// cancelled run) does not abort it half-way, and the next caller waits for that same load
    /// instead of starting the file over. The wait is off the calling step's clock: loading (and
    /// pulling, on a fresh machine) is not charged to the step's timeout: it is off `clock`, the
    /// calling step's.
    async fn engine(&self, clock: &StepClock) -> Result<(LocalEngine, Duration), Failure> {
        let started = std::time::Instant::now();
        let (weights, waited) = match self.load.shared.get() {
            Some(loaded) => (loaded.clone()?, Duration::ZERO),
            None => {
                let cell = Arc::clone(&self.load.shared);
                let (source, max_batch) = (self.source.clone(), self.settings.max_batch);
                let notice = Arc::clone(&self.load.notice);
                let weights = clock
                    .off(tokio::spawn(async move {
                        cell.get_or_init(|| load(source, max_batch, notice))
                            .await
                            .clone()
                    }))
                    .await
                    .map_err(|e| {
                        Failure::new(FailureCode::InferenceModelUnavailable, e.to_string())
                    })??;
                (weights, started.elapsed())
            }
        };
        let engine = LocalEngine {
            weights,
            settings: self.settings.clone(),
        };
        Ok((engine, waited))
    }
}

/// Finds (pulling or fetching it if needed) and loads the file of `source`.
async fn load(
    source: LocalSource,
    max_batch: usize,
    notice: Notice,
) -> Result<Arc<Weights>, Failure> {
    let path = source.locate(&notice).await?;
    notice(&format!("loading {} …", path.display()));
    Ok(Arc::new(Weights::load(&path, max_batch).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temperature_samples_from_more_than_the_top_token() {
        let hot = sampling(Some(0.7));
        assert_eq!((hot.temperature, hot.top_k), (Some(0.7), None));
        for greedy in [sampling(None), sampling(Some(0.0))] {
            assert_eq!((greedy.temperature, greedy.top_k), (None, Some(1)));
        }
    }

    #[test]
    fn models_with_the_same_source_and_batch_size_share_one_load() {
        let quiet: Notice = Arc::new(|_: &str| {});
        let loads = LocalLoads::default();
        let make =
            |loads: &LocalLoads, path: &str, max_batch, context_length, decoder_constraints| {
                let settings = LocalSettings {
                    max_batch,
                    context_length,
                    decoder_constraints,
                };
                let source = LocalSource::File(path.into());
                LocalModel::shared(source, settings, Arc::clone(&quiet), loads)
            };
        let first = make(&loads, "/models/a.gguf", 8, None, true);
        let same_load =
            |other: Arc<LocalModel>| Arc::ptr_eq(&first.load.shared, &other.load.shared);
        assert!(same_load(make(&loads, "/models/a.gguf", 8, None, true)));
        assert!(same_load(make(
            &loads,
            "/models/a.gguf",
            8,
            Some(512),
            false
        )));
        assert!(!same_load(make(&loads, "/models/a.gguf", 1, None, true)));
        assert!(!same_load(make(&loads, "/models/b.gguf", 8, None, true)));
        let elsewhere = LocalLoads::default();
        assert!(
            !same_load(make(&elsewhere, "/models/a.gguf", 8, None, true)),
            "another session's loads are its own"
        );
    }
}
