#!/usr/bin/env bash
# Local-model speed, pagantic (mistral.rs) vs llama.cpp, side by side on the same machine, the
# same GGUF files and 2 threads: load time (pagantic's split into phases, best of 3 fresh
# processes), prefill tok/s, decode tok/s, and 8 concurrent requests. Prints both engines'
# versions first.
#
#   bash benches/inference.sh
#
# Needs the embedded model pulled (`cargo run -- models pull`). The llama.cpp side needs
# llama-cpp-python in a venv given as LLAMA_VENV; build it with AVX-512 on and AMX off (a native
# build dies with an illegal instruction on these machines):
#   python3 -m venv /tmp/llamavenv
#   CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
#     /tmp/llamavenv/bin/pip install llama-cpp-python==0.3.36
#   LLAMA_VENV=/tmp/llamavenv bash benches/inference.sh
# pagantic's side is measured on both the original file and the derived Q8_0 file it runs by
# default; llama.cpp on the original (its Q5_0 kernels are SIMD already).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${PAGANTIC_HOME:-$HOME/.cache/pagantic}/models"
original="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
derived="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.q8_0-derived.gguf"
[ -f "$original" ] || { echo "pull the model first: cargo run -- models pull" >&2; exit 1; }
cargo build --locked --quiet --example local_speed --example load_phases
bin="${CARGO_TARGET_DIR:-target}/debug/examples"
# With RUST_BACKTRACE set, mistral.rs 0.8.1 captures and formats a backtrace for each optional
# GGUF key the file lacks while loading (most of a second while dependencies carried debug
# information; little since): measure what most users' shells run.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
# mistral.rs sizes its thread pool from the visible cores; pin both sides to the same two.
run() { taskset -c 0,1 "$@"; }
# The version Cargo.lock pins for a crate.
locked() { awk -v name="name = \"$1\"" '$0 == name { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock; }
echo "pagantic engine: mistral.rs $(locked mistralrs-core) on candle-core $(locked candle-core)"
if [ -n "${LLAMA_VENV:-}" ]; then
  echo "llama.cpp engine: llama-cpp-python $("$LLAMA_VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')"
fi
echo "pagantic, load of the embedded model (derived Q8_0 file), best of 3:"
run "$bin"/load_phases 3
echo "pagantic, derived Q8_0 file:";  run "$bin"/local_speed "$derived"
echo "pagantic, original file:";      run "$bin"/local_speed "$original"
# The same with mistral.rs decoding up to 8 sequences together: faster or not, its batched
# decoding corrupts answers in 0.8.1, which is why plans run one request at a time.
echo "pagantic, derived file, max_batch 8 (speed comparison only):"; run "$bin"/local_speed "$derived" 8
if [ -n "${LLAMA_VENV:-}" ]; then
  echo "llama.cpp, original file:";   run "$LLAMA_VENV/bin/python" benches/peers/llamacpp_speed.py "$original" 2
fi
echo "(load_s in each line above is that engine's load time, in seconds)"
