//! Diagnostics about plan, policy and test files: what went wrong, where, and what to do.
//!
//! What kind of problem it is ([`PlanError`], with its stable code, message and help) is kept apart
//! from where it is ([`Diagnostic`]: the source file, labelled byte spans, and a run-time hint such
//! as "did you mean"). Codes are public API: never rename or reuse one; `docs/diagnostics.md` lists
//! them all and a test keeps the list and the code in step.

use std::fmt;
use std::sync::Arc;

use miette::{
    LabeledSpan, MietteError, MietteSpanContents, Severity, SourceCode, SourceSpan, SpanContents,
};
use thiserror::Error;

pub use crate::core::text::{did_you_mean, suggestion};

/// A file's name and text, shared by every diagnostic about it.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: Arc<str>,
    pub text: Arc<str>,
    /// For a copy with one long line shortened for display: that line (from 0) and how many
    /// columns were cut from its start, so reported columns stay those of the file.
    pub column_shift: Option<(usize, usize)>,
}

impl Source {
    pub fn new(name: impl Into<Arc<str>>, text: impl Into<Arc<str>>) -> Self {
        Source {
            name: name.into(),
            text: text.into(),
            column_shift: None,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }
}

impl SourceCode for Source {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let contents = self
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        let column = match self.column_shift {
            Some((line, shift)) if line == contents.line() => contents.column() + shift,
            _ => contents.column(),
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.to_string(),
            contents.data(),
            *contents.span(),
            contents.line(),
            column,
            contents.line_count(),
        )))
    }
}

/// Every kind of problem found while loading and checking a plan, policy or test file.
#[derive(Debug, Clone, Error, miette::Diagnostic)]
pub enum PlanError {
    /// The file could not be read. Check the path and permissions.
    #[error("cannot read {path}: {reason}")]
    #[diagnostic(
        code(plan::read_failed),
        help("check that the path exists and is readable")
    )]
    ReadFailed { path: String, reason: String },

    /// The file is not UTF-8 text.
    #[error("the file is not UTF-8 text")]
    #[diagnostic(
        code(plan::not_utf8),
        help("plans are YAML text files; save this one as UTF-8")
    )]
    NotUtf8,

    /// The file holds no YAML document.
    #[error("the file is empty")]
    #[diagnostic(
        code(plan::empty),
        help("a plan needs at least `version: 1`, a `name` and `steps`")
    )]
    Empty,

    /// The YAML does not parse.
    #[error("invalid YAML: {message}")]
    #[diagnostic(code(yaml::syntax), help("fix the YAML syntax at the marked position"))]
    YamlSyntax { message: String },

    /// A mapping has the same key twice; YAML parsers disagree on which wins, so we refuse.
    #[error("duplicate key `{key}`")]
    #[diagnostic(code(yaml::duplicate_key), help("remove or rename one of the two"))]
    DuplicateKey { key: String },

    /// A mapping key that is a mapping, a sequence or null.
    #[error("mapping keys must be strings")]
    #[diagnostic(code(yaml::complex_key), help("use a plain string as the key"))]
    ComplexKey,

    /// A YAML tag pagantic does not understand.
    #[error("unsupported tag `{tag}`")]
    #[diagnostic(
        code(yaml::unsupported_tag),
        help(
            "only the core tags !!str, !!int, !!float, !!bool, !!null, !!map and !!seq are accepted"
        )
    )]
    UnsupportedTag { tag: String },

    /// A scalar that cannot be a JSON value (e.g. `.inf`, or a tagged scalar of the wrong type).
    #[error("{message}")]
    #[diagnostic(
        code(yaml::bad_scalar),
        help("write a value JSON can hold, or quote it to make it a string")
    )]
    BadScalar { message: String },

    /// Nesting beyond the supported depth.
    #[error("the document is nested more than {max} levels deep")]
    #[diagnostic(
        code(yaml::too_deep),
        help("plans never need this much nesting; flatten the structure")
    )]
    TooDeep { max: usize },

    /// The document, aliases expanded, is beyond the supported size.
    #[error("the document expands to more than {max} nodes")]
    #[diagnostic(
        code(yaml::too_large),
        help(
            "every alias counts as a copy of what it names; use fewer or smaller aliases, or split the plan"
        )
    )]
    TooLarge { max: usize },

    /// A second `---` document in one file.
    #[error("a plan file holds exactly one YAML document")]
    #[diagnostic(
        code(yaml::multiple_documents),
        help("move the second document into its own file")
    )]
    MultipleDocuments,

    /// A field the schema does not define here.
    #[error("unknown field `{field}` in {place}")]
    #[diagnostic(code(plan::unknown_field))]
    UnknownField { field: String, place: String },

    /// A required field is absent.
    #[error("missing field `{field}` in {place}")]
    #[diagnostic(code(plan::missing_field))]
    MissingField { field: String, place: String },

    /// A value of the wrong JSON type.
    #[error("{place}: expected {expected}, found {found}")]
    #[diagnostic(code(plan::wrong_type))]
    WrongType {
        place: String,
        expected: String,
        found: String,
    },

    /// An unknown `type:` of a step.
    #[error("unknown step type `{found}`")]
    #[diagnostic(code(plan::unknown_step_type))]
    UnknownStepType { found: String },

    /// A value outside the allowed set.
    #[error("{place}: `{found}` is not one of {allowed}")]
    #[diagnostic(code(plan::invalid_value))]
    InvalidValue {
        place: String,
        found: String,
        allowed: String,
    },

    /// A Lark grammar the local decoder (llguidance) refuses.
    #[error("invalid Lark grammar: {message}")]
    #[diagnostic(
        code(plan::invalid_lark),
        help(
            "the grammar starts at `start: …`; terminals are \"strings\" or /regexes/, rules `name: a | b`"
        )
    )]
    InvalidLark { message: String },

    /// A mapping that must have exactly one of several keys (a validate rule, a constraint).
    #[error("{place}: give exactly one of {allowed} (found {found})")]
    #[diagnostic(
        code(plan::one_key),
        help("each form is a mapping of one key; write two rules or pick one form")
    )]
    OneKey {
        place: String,
        allowed: String,
        found: String,
    },

    /// A number or length outside its bounds.
    #[error("{place}: {message}")]
    #[diagnostic(
        code(plan::out_of_range),
        help("change the value to one within the bounds (schemas/plan.schema.json lists them)")
    )]
    OutOfRange { place: String, message: String },

    /// A duration that does not parse.
    #[error("{place}: `{found}` is not a duration")]
    #[diagnostic(
        code(plan::bad_duration),
        help("write a number and a unit (ms, s, m, h), e.g. `500ms`, `30s`, `1m30s`")
    )]
    BadDuration { place: String, found: String },

    /// A step name that is not an identifier.
    #[error("{place}: `{found}` is not a valid name")]
    #[diagnostic(
        code(plan::invalid_name),
        help(
            "names start with a letter or `_` and contain only letters, digits and `_`, so templates can write `steps.<name>`"
        )
    )]
    InvalidName { place: String, found: String },

    /// Any other schema violation.
    #[error("{place}: {message}")]
    #[diagnostic(
        code(plan::schema_violation),
        help("see schemas/plan.schema.json for the plan format")
    )]
    SchemaViolation { place: String, message: String },

    /// Two steps with one name.
    #[error("duplicate step name `{name}`")]
    #[diagnostic(
        code(plan::duplicate_step),
        help("step names must be unique within a plan; rename one of them")
    )]
    DuplicateStep { name: String },

    /// `needs` (or a fallback) names a step that does not exist.
    #[error("unknown step `{name}`")]
    #[diagnostic(code(plan::unknown_step))]
    UnknownStep { name: String },

    /// The steps' dependencies form a cycle.
    #[error("dependency cycle: {path}")]
    #[diagnostic(
        code(plan::cycle),
        help(
            "a step cannot (even indirectly) need itself; remember that a step without `needs` follows the step before it"
        )
    )]
    Cycle { path: String },

    /// A step names a model not declared in `models:`.
    #[error("unknown model `{name}`")]
    #[diagnostic(code(plan::unknown_model))]
    UnknownModel { name: String },

    /// A step uses a model of a kind it cannot use.
    #[error("model `{name}` is {kind} model, but {role} is needed here")]
    #[diagnostic(code(plan::wrong_model_kind))]
    WrongModelKind {
        name: String,
        kind: String,
        role: String,
    },

    /// A step names a corpus not declared in `corpora:`.
    #[error("unknown corpus `{name}`")]
    #[diagnostic(code(plan::unknown_corpus))]
    UnknownCorpus { name: String },

    /// A step or agent names a tool not declared in `tools:`.
    #[error("unknown tool `{name}`")]
    #[diagnostic(code(plan::unknown_tool))]
    UnknownTool { name: String },

    /// A route step names an agent not declared in `agents:`.
    #[error("unknown agent `{name}`")]
    #[diagnostic(code(plan::unknown_agent))]
    UnknownAgent { name: String },

    /// A prompt file that does not exist.
    #[error("prompt file `{name}` not found")]
    #[diagnostic(code(plan::prompt_not_found))]
    PromptNotFound { name: String },

    /// A template (inline or in a prompt file) that does not parse.
    #[error("template syntax error: {message}")]
    #[diagnostic(
        code(plan::template_syntax),
        help(
            "see the minijinja syntax: {{{{ expr }}}}, {{% if %}}…{{% endif %}}, {{% for %}}…{{% endfor %}}"
        )
    )]
    TemplateSyntax { message: String },

    /// A template reads a variable nothing provides.
    #[error("`{variable}` is not defined here")]
    #[diagnostic(code(plan::unknown_variable))]
    UnknownVariable { variable: String },

    /// A template reads `input` in a step that has no upstream step.
    #[error("`input` is not defined in step `{step}`: it has no upstream step")]
    #[diagnostic(
        code(plan::no_input),
        help("use `inputs.<name>` for the plan's inputs, or give the step `needs`")
    )]
    NoInput { step: String },

    /// A JSON Schema in the plan that is not a valid JSON Schema.
    #[error("invalid JSON Schema: {message}")]
    #[diagnostic(
        code(plan::invalid_schema),
        help("the value must be a JSON Schema (draft 2020-12)")
    )]
    InvalidSchema { message: String },

    /// A schema file that cannot be read or parsed.
    #[error("cannot load schema file `{path}`: {reason}")]
    #[diagnostic(
        code(plan::schema_file),
        help("the path is relative to the plan file and must hold JSON")
    )]
    SchemaFile { path: String, reason: String },

    /// `source: default` (the embedded MiniLM, a bi-encoder) with `task: cross-encoder`.
    #[error("model `{name}`: the embedded default ONNX model is a bi-encoder, not a cross-encoder")]
    #[diagnostic(
        code(plan::onnx_default_task),
        help(
            "write `task: bi-encoder`, or give a cross-encoder exported to ONNX as `source:` (a .onnx file or a directory holding model.onnx)"
        )
    )]
    OnnxDefaultTask { name: String },

    /// A regular expression that does not compile.
    #[error("invalid regular expression: {message}")]
    #[diagnostic(
        code(plan::invalid_regex),
        help(
            "the syntax is Rust's `regex` (no look-around, no backreferences); escape a literal `(`, `[`, `.` or `\\` with `\\`"
        )
    )]
    InvalidRegex { message: String },

    /// A GBNF grammar that cannot be translated for the decoder.
    #[error("invalid GBNF grammar: {message}")]
    #[diagnostic(
        code(plan::invalid_grammar),
        help("GBNF rules are `name ::= body`; the start rule is `root`")
    )]
    InvalidGrammar { message: String },

    /// Of two alternative fields, none or both were given.
    #[error("give exactly one of `{first}` and `{second}`")]
    #[diagnostic(code(plan::exclusive_fields))]
    ExclusiveFields { first: String, second: String },

    /// An input's default does not have the input's type.
    #[error("the default of input `{input}` is not of type {expected}")]
    #[diagnostic(
        code(plan::input_default_type),
        help("change the default or the input's `type`")
    )]
    InputDefaultType { input: String, expected: String },

    /// A corpus file pattern that matches no file (patterns are relative to the plan).
    #[error("`{pattern}` matches no file")]
    #[diagnostic(
        code(plan::corpus_no_match),
        help(
            "corpus patterns are relative to the plan's directory; check the path and the extension"
        )
    )]
    CorpusNoMatch { pattern: String },

    /// A corpus with no documents at all.
    #[error("corpus `{name}` has no documents")]
    #[diagnostic(code(plan::empty_corpus), help("give `files`, `documents` or `jsonl`"))]
    EmptyCorpus { name: String },

    /// An agent must run exactly one thing.
    #[error("agent `{name}` must have exactly one of `tool`, `plan` and `template`")]
    #[diagnostic(
        code(plan::agent_target),
        help(
            "an agent runs one thing: `tool` (a declared tool), `plan` (another plan file) or `template` (sent to its `model`)"
        )
    )]
    AgentTarget { name: String },

    /// A `plan:` agent's plan is itself invalid (its problems follow, located in its file), or
    /// breaks the policy this plan runs under, which sub-plans inherit.
    #[error(
        "agent `{agent}` runs {path}, which is not a valid plan here ({count} problem{plural})"
    )]
    #[diagnostic(
        code(plan::sub_plan_invalid),
        help("fix the problems listed for {path}; a sub-plan is held to this plan's policy too")
    )]
    SubPlanInvalid {
        agent: String,
        path: String,
        count: usize,
        plural: &'static str,
    },

    /// A plan's `reduce:` plan is itself invalid (its problems follow, located in its file), or
    /// breaks the policy this plan runs under, which it inherits.
    #[error("the reduce plan {path} is not a valid plan here ({count} problem{plural})")]
    #[diagnostic(
        code(plan::reduce_invalid),
        help(
            "fix the problems listed for {path}; a reduce plan is held to this plan's policy too"
        )
    )]
    ReduceInvalid {
        path: String,
        count: usize,
        plural: &'static str,
    },

    /// A reduce plan is given the group's rows as its input `rows`, a list.
    #[error("the reduce plan {path} {found}; it is given each group's rows as `rows`, a list")]
    #[diagnostic(
        code(plan::reduce_rows),
        help(
            "declare `inputs: {{ rows: {{ type: array }} }}` in {path} (and `group`, `fold_level` if its prompt reads them)"
        )
    )]
    ReduceRows { path: String, found: String },

    /// Sub-plan agents that lead back to a plan that uses them would run forever.
    #[error("agent `{agent}` runs {path}, which leads back to this plan (a cycle)")]
    #[diagnostic(
        code(plan::sub_plan_cycle),
        help("a sub-plan agent must not lead back to a plan that uses it")
    )]
    SubPlanCycle { agent: String, path: String },

    /// A validate step's feedback goes to a model step it depends on, which can answer again.
    #[error("`{name}` cannot take the feedback of validate step `{step}`")]
    #[diagnostic(
        code(plan::feedback_target),
        help(
            "`feedback.step` names an `infer`, `structured`, `redundant`, `agent` or `route` step upstream of the validate step (in its `needs`, or followed by it)"
        )
    )]
    FeedbackTarget { name: String, step: String },

    /// A rerank step takes its query from a retrieve step upstream unless it gives one.
    #[error("rerank step `{step}` has no query to score against")]
    #[diagnostic(
        code(plan::rerank_query),
        help("give the step a `query:` template, or put a `retrieve` step upstream of it")
    )]
    RerankQuery { step: String },

    /// A step is connected to an input it can never take: a rerank step fed text, a tool's
    /// JSON object, several steps' outputs at once, or nothing at all.
    #[error("step `{step}` takes {accepts}, but its input {gives}")]
    #[diagnostic(
        code(plan::step_boundary),
        help(
            "feed it from a step whose output it takes (a `retrieve` or `rerank` step gives candidates), through `needs: [<step>]`"
        )
    )]
    StepBoundary {
        step: String,
        accepts: String,
        gives: String,
    },

    /// Grammar constraints (regex, Lark, GBNF) are enforced while decoding, which only the
    /// local engine with decoder constraints on can do.
    #[error("model `{model}` cannot enforce a grammar constraint ({reason})")]
    #[diagnostic(
        code(plan::grammar_unsupported),
        help(
            "use a `mistralrs` model with decoder constraints on, or a `json_schema` constraint, which every engine accepts"
        )
    )]
    GrammarUnsupported { model: String, reason: String },

    /// A retrieve step that calls a tool has no corpus for `model` or `scorer` to search.
    #[error("`{field}` searches a corpus; this step retrieves with a `tool`")]
    #[diagnostic(
        code(plan::retrieve_corpus_only),
        help(
            "remove it (a retriever tool ranks its own results), or retrieve from a `corpus` instead of the tool; a `rerank` step after it can re-score the tool's candidates"
        )
    )]
    RetrieveCorpusOnly { field: String },

    /// `cache: true` on a tool whose results must not be reused: one that is not idempotent,
    /// that changes something (`side_effects` `write` or `external`), or whose answer changes
    /// from call to call.
    #[error("tool `{name}` cannot be cached: {reason}")]
    #[diagnostic(
        code(plan::tool_cache),
        help(
            "only a tool whose answer depends on its arguments alone — `idempotent: true`, with `side_effects: none` or `read` — may keep its results in the call cache; remove `cache: true`"
        )
    )]
    ToolCache { name: String, reason: String },

    /// A `kind: mcp` tool sets a field that does not apply to how its server is reached.
    #[error("tool `{name}`: `{field}` does not apply to an MCP server reached by `{transport}`")]
    #[diagnostic(
        code(plan::mcp_field),
        help(
            "`env` and `working_dir` are for a server started as a `command`, `headers_env` for one reached at a `url`: remove the field, or reach the server the other way"
        )
    )]
    McpField {
        name: String,
        field: &'static str,
        transport: &'static str,
    },

    /// A `template` agent has no model to send its template to.
    #[error("agent `{name}` has a `template` but no `model` to send it to")]
    #[diagnostic(
        code(plan::agent_model),
        help("add `model:` naming a language model declared in `models`")
    )]
    AgentModel { name: String },

    /// `field_majority` votes field by field over JSON objects, which only a schema guarantees.
    #[error("`field_majority` voting needs a `schema` for the candidates")]
    #[diagnostic(
        code(plan::field_majority_schema),
        help(
            "add `schema:` (inline or a .json file) so every candidate is a JSON object, or vote with `majority`"
        )
    )]
    FieldMajoritySchema,

    /// A vote's quorum larger than the candidates asked for can never be met.
    #[error("`min_candidates` is {min}, but the step asks for only {n} candidates")]
    #[diagnostic(
        code(plan::min_candidates),
        help("lower `voting.min_candidates` to at most `n`, or raise `n`")
    )]
    MinCandidates { min: u32, n: u32 },

    /// A parameters schema requires a property it does not declare, so no call can satisfy it
    /// in a way the model was told about.
    #[error("`{name}` is required but not declared in `properties`")]
    #[diagnostic(
        code(plan::required_not_declared),
        help("declare it under `properties`, or remove it from `required`")
    )]
    RequiredNotDeclared { name: String },

    /// The plan a test file names is invalid (its problems follow, located in its file).
    #[error("the plan {path} is not valid ({count} problem{plural}); nothing can be tested")]
    #[diagnostic(
        code(test::plan_invalid),
        help("fix the problems listed for the plan; `plan:` is relative to the test file")
    )]
    TestPlanInvalid {
        path: String,
        count: usize,
        plural: &'static str,
    },

    /// A variant's overrides leave a plan that is not valid (its problems follow).
    #[error("variant `{variant}` makes the plan invalid ({count} problem{plural})")]
    #[diagnostic(
        code(test::variant_invalid),
        help(
            "the problems listed next are in the plan as this variant sets it; fix the values in `set`"
        )
    )]
    VariantInvalid {
        variant: String,
        count: usize,
        plural: &'static str,
    },

    /// A test file with nothing to run.
    #[error("the test file has no cases")]
    #[diagnostic(
        code(test::no_cases),
        help("add `cases:` (inputs and assertions) or a `dataset:` (a JSON Lines or CSV file)")
    )]
    NoCases,

    /// Two cases with one name.
    #[error("duplicate case name `{name}`")]
    #[diagnostic(
        code(test::duplicate_case),
        help("case names are unique in a test file (reports and --filter use them); rename one")
    )]
    DuplicateCase { name: String },

    /// Two variants with one name.
    #[error("duplicate variant name `{name}`")]
    #[diagnostic(
        code(test::duplicate_variant),
        help(
            "variant names are unique in a test file (reports and --variant use them); rename one"
        )
    )]
    DuplicateVariant { name: String },

    /// An assertion's `step` names no step of the plan.
    #[error("the plan has no step `{name}`")]
    #[diagnostic(
        code(test::unknown_step),
        help(
            "`step:` names a step of the plan under test; leave it out to check the plan's output"
        )
    )]
    UnknownAssertionStep { name: String },

    /// A retrieval metric on something that has no candidates.
    #[error("`{assertion}` reads candidates, but `{step}` is {kind}")]
    #[diagnostic(
        code(test::not_retrieval_step),
        help(
            "retrieval metrics (hit_at_k, recall_at_k, mrr) need `step:` naming a `retrieve` or `rerank` step"
        )
    )]
    NotRetrievalStep {
        step: String,
        kind: String,
        assertion: String,
    },

    /// `fails_with` names no failure code.
    #[error("`{code}` is not a failure code")]
    #[diagnostic(
        code(test::unknown_failure_code),
        help("docs/failures.md lists the codes, e.g. VALIDATION_RULE_FAILED")
    )]
    UnknownFailureCode { code: String },

    /// The dataset file cannot be read.
    #[error("cannot read the dataset {path}: {reason}")]
    #[diagnostic(
        code(test::dataset_unreadable),
        help(
            "`dataset.file` is relative to the test file: a .jsonl file or a .csv file with a header"
        )
    )]
    DatasetUnreadable { path: String, reason: String },

    /// A variant's `set` key that names nothing in the plan.
    #[error("cannot set `{key}`: {reason}")]
    #[diagnostic(
        code(test::bad_override),
        help(
            "keys are `STEP.FIELD` (`answer.prompt`, `answer.temperature`) or a path from the plan's top (`models.llm.source`)"
        )
    )]
    BadOverride { key: String, reason: String },

    /// A step whose type the policy does not allow.
    #[error("step type `{step_type}` is not allowed by the {origin}")]
    #[diagnostic(code(policy::step_type_not_allowed))]
    StepTypeNotAllowed { step_type: String, origin: String },

    /// More steps than the policy allows.
    #[error("the plan has {count} steps; the {origin} allows at most {max}")]
    #[diagnostic(code(policy::too_many_steps), help("split the plan, or merge steps"))]
    TooManySteps {
        count: usize,
        max: u32,
        origin: String,
    },

    /// A graph where the policy requires a chain.
    #[error("the {origin} requires a linear plan, but {reason}")]
    #[diagnostic(
        code(policy::not_linear),
        help("remove `needs` that fan out or join, so each step follows exactly one other")
    )]
    NotLinear { reason: String, origin: String },

    /// A tool the policy does not allow.
    #[error("tool `{name}` is not allowed by the {origin}")]
    #[diagnostic(code(policy::tool_not_allowed))]
    ToolNotAllowed { name: String, origin: String },

    /// A tool that requires a capability the policy does not grant.
    #[error("tool `{name}` requires {missing}, which the {origin} does not grant")]
    #[diagnostic(
        code(policy::capability_not_granted),
        help("add it to the policy's allowed_capabilities, or remove the tool")
    )]
    CapabilityNotGranted {
        name: String,
        missing: String,
        origin: String,
    },

    /// A timeout longer than the policy allows.
    #[error("timeout {found} exceeds the limit of {max} (timeout_per_step, set by the {origin})")]
    #[diagnostic(code(policy::timeout_exceeds), help("lower the step's timeout"))]
    TimeoutExceeds {
        found: String,
        max: String,
        origin: String,
    },

    /// More tool iterations than the policy allows.
    #[error("max_tool_iterations {found} exceeds the limit of {max} set by the {origin}")]
    #[diagnostic(
        code(policy::tool_iterations_exceed),
        help("lower the step's max_tool_iterations")
    )]
    ToolIterationsExceed {
        found: u32,
        max: u32,
        origin: String,
    },

    /// A step that may use more tokens than the policy's whole budget.
    #[error("this step may use {found} tokens; the budget set by the {origin} is {max}")]
    #[diagnostic(
        code(policy::max_tokens_exceed),
        help("lower max_tokens (for redundant steps, max_tokens × n counts)")
    )]
    MaxTokensExceed {
        found: u64,
        max: u64,
        origin: String,
    },

    /// A step whose completion tokens alone (its `max_tokens` at its model's price) may cost
    /// more than the policy's whole cost budget.
    #[error(
        "this step's {tokens} completion tokens may cost {cost} on model `{model}`; the max_cost set by the {origin} is {max}"
    )]
    #[diagnostic(
        code(policy::max_cost_exceed),
        help(
            "lower max_tokens (for redundant steps, max_tokens × n counts), use a cheaper model, or raise max_cost"
        )
    )]
    MaxCostExceed {
        tokens: u64,
        cost: String,
        model: String,
        max: f64,
        origin: String,
    },
}

/// One problem, located: the kind of problem, the file, and labelled spans in it.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub error: PlanError,
    pub source: Option<Source>,
    pub labels: Vec<LabeledSpan>,
    /// A run-time help line (e.g. "did you mean `model`?"), shown after the kind's own help.
    pub hint: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with no location yet.
    pub fn new(error: PlanError) -> Self {
        Diagnostic {
            error,
            source: None,
            labels: Vec::new(),
            hint: None,
        }
    }

    /// Located in `source`, with a primary label on `span`.
    pub fn at(
        error: PlanError,
        source: &Source,
        span: std::ops::Range<usize>,
        label: impl Into<String>,
    ) -> Self {
        Diagnostic {
            error,
            source: Some(source.clone()),
            labels: vec![LabeledSpan::new_primary_with_span(Some(label.into()), span)],
            hint: None,
        }
    }

    /// Adds a secondary label.
    pub fn with_label(mut self, span: std::ops::Range<usize>, label: impl Into<String>) -> Self {
        self.labels
            .push(LabeledSpan::new_with_span(Some(label.into()), span));
        self
    }

    /// Adds a run-time help line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The stable code, e.g. `plan::unknown_step`.
    pub fn code(&self) -> String {
        miette::Diagnostic::code(&self.error)
            .map(|c| c.to_string())
            .unwrap_or_default()
    }

    /// The file name, 1-based line and column of the primary label, when located.
    pub fn location(&self) -> Option<(&str, usize, usize)> {
        let source = self.source.as_ref()?;
        let label = self
            .labels
            .iter()
            .find(|l| l.primary())
            .or(self.labels.first())?;
        let (line, column) = source.line_col(label.offset());
        Some((&source.name, line, column))
    }

    /// The help text: the kind's own help, then the hint.
    pub fn help_text(&self) -> Option<String> {
        let own = miette::Diagnostic::help(&self.error).map(|h| h.to_string());
        match (own, &self.hint) {
            (Some(own), Some(hint)) => Some(format!("{hint}\n{own}")),
            (Some(own), None) => Some(own),
            (None, Some(hint)) => Some(hint.clone()),
            (None, None) => None,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        miette::Diagnostic::code(&self.error)
    }

    fn severity(&self) -> Option<Severity> {
        Some(Severity::Error)
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help_text()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|s| s as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }
}

/// The hint for `key: {{ template }}`, which YAML reads as a mapping.
pub const QUOTE_TEMPLATES: &str =
    "in YAML a value starting with `{` is a mapping; quote templates: \"{{ inputs.question }}\"";

/// The one-line reason of a regex error ("unclosed group"), without its ASCII-art excerpt.
pub(crate) fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| first_line_of(&text), str::to_string)
}

/// The first non-blank line of `text`, trimmed (library errors often add excerpts below it).
pub(crate) fn first_line_of(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let source = Source::new("p.yaml", "a: 1\nbé: x\n");
        assert_eq!(source.line_col(0), (1, 1));
        assert_eq!(source.line_col(5), (2, 1));
        assert_eq!(source.line_col(9), (2, 4));
    }
}
