#!/usr/bin/env bash
# Where the local engine's load time goes, by function: `perf record` with DWARF call stacks over
# one load of the embedded model (`examples/load_phases`' child: load, then one short request),
# then the share of the load's CPU samples spent inside each of the functions that make it up
# (inclusive: a function's share counts what it calls, so the rows overlap).
#
#   bash benches/load_profile.sh
#
# Needs `perf` and the embedded model pulled (`cargo run -- models pull`). Dependencies carry no
# debug information (Cargo.toml); perf walks their stacks by their unwind tables and names them by
# their symbols, which finds every row below (a function the compiler inlined would show as "-").
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }
cargo build --locked --quiet --example load_phases
target="${CARGO_TARGET_DIR:-target}"
model="${PAGANTIC_HOME:-$HOME/.cache/pagantic}/models/qwen2.5-coder-0.5b-instruct-q4_k_m.q8_0-derived.gguf"
[ -f "$model" ] || { echo "pull the model first: cargo run -- models pull" >&2; exit 1; }
# What most users' shells run (with RUST_BACKTRACE set, mistral.rs also captures a backtrace for
# each optional GGUF key the file lacks).
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
mkdir -p "$target/load-profile"
data="$target/load-profile/perf.data"
taskset -c 0,1 perf record -q -F 499 --call-graph dwarf,32768 -o "$data" \
  "$target/debug/examples/load_phases" --child "$model" >/dev/null
perf report -i "$data" --children --sort symbol --stdio -g none 2>/dev/null |
  python3 -c '
import re, sys
# (row, pattern of the symbol): mistral.rs 0.8.1, candle 0.10 and llguidance 1.9 names.
rows = [
    ("the whole load (GGUFLoader::load_model_from_path)", r"GGUFLoader as .*Loader>::load_model_from_path$"),
    ("  GGUF header and metadata (Content::from_readers)", r"gguf::content::Content<R>::from_readers$"),
    ("  tokenizer from the GGUF metadata", r"convert_gguf_to_hf_tokenizer$"),
    ("  model weights (quantized_qwen from_gguf)", r"quantized_qwen::ModelWeights as .*FromGGUF>::from_gguf$"),
    ("    rotary tables, built once per layer", r"layers::RotaryEmbedding::new$"),
    ("    tensors read and copied (qtensor_from_ggml)", r"ggml_file::qtensor_from_ggml$"),
    ("    token_embd dequantised to F32", r"candle_core::quantized::QTensor::dequantize$"),
    ("  llguidance parser factory (build_llg_factory)", r"pipeline::llg::build_llg_factory$"),
    ("    token trie (TokTrie::from)", r"toktrie::toktree::TokTrie::from$"),
    ("    token slices (SlicedBiasComputer::new)", r"SlicedBiasComputer::new$"),
    ("  end-of-sequence tokens (calculate_eos_tokens)", r"chat_template::calculate_eos_tokens$"),
]
found = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[\.\]\s+(.*?)\s*(-\s+-\s*)?$", line)
    if not m:
        continue
    share, symbol = float(m.group(1)), m.group(2)
    for name, pattern in rows:
        if re.search(pattern, symbol):
            found[name] = max(found.get(name, 0.0), share)
whole = found.get(rows[0][0])
if not whole:
    sys.exit("the profile has no GGUF load in it")
for name, _ in rows:
    share = found.get(name)
    print(f"{name:<54} {100 * share / whole:5.1f}%" if share else f"{name:<54}     -")
'
