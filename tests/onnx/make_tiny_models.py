"""Generates the tiny BERT models the ONNX scorer tests compare against, and their references.

    python3 -m venv /tmp/onnxvenv
    /tmp/onnxvenv/bin/pip install onnxruntime==1.31.1 onnx torch transformers tokenizers
    /tmp/onnxvenv/bin/python tests/onnx/make_tiny_models.py

Writes, next to this script:
  tokenizer.json            a WordPiece tokenizer over a small vocabulary, BERT's pair template
  tiny-cross-encoder.onnx   BertForSequenceClassification, 2 layers, hidden 32, one logit
  tiny-bi-encoder.onnx      BertModel with the same shape (output: last_hidden_state)
  reference.json            for fixed (query, passage) pairs: the cross-encoder's logit and the
                            bi-encoder's cosine, computed by the Python onnxruntime on the same
                            files, with the same tokenizer, truncation and padding pagantic uses.
Random weights (seeded): the point is that pagantic computes exactly what ONNX Runtime computes.
"""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification, BertModel

HERE = Path(__file__).parent
MAX_LENGTH = 24
WORDS = """how do i resume a batch run the plan rows again skip failed output file each row
written once validate plans in ci with policy step retry timeout model pull cache onnx reranker
what is weather nice today cat sat on mat ##s ##ed ##ing . , ?""".split()
PAIRS = [
    ("how do i resume a batch ?", "run the plan again with resume : rows written once are skipped ."),
    ("how do i resume a batch ?", "the weather is nice today ."),
    ("validate plans in ci", "validate each plan with a policy file in ci ."),
    ("validate plans in ci", "the cat sat on the mat"),
    ("model pull cache", "pull the model once ; the cache keeps it"),
    # Longer than MAX_LENGTH: the passage is cut, the query kept.
    ("what is a reranker ?", " ".join(["each row is written once and failed rows are skipped"] * 4)),
    # Words outside the vocabulary become [UNK].
    ("zebra quantum", "onnx reranker step"),
]


def tokenizer() -> Tokenizer:
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tok


class ByName(torch.nn.Module):
    """Calls a Hugging Face model with its three inputs by name and returns one output."""

    def __init__(self, model: torch.nn.Module, output: str):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out[self.output]


def export(model: torch.nn.Module, path: Path, output: str) -> None:
    ids = torch.ones((2, 8), dtype=torch.int64)
    torch.onnx.export(
        ByName(model, output),
        (ids, ids, torch.zeros_like(ids)),
        str(path),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=[output],
        dynamic_axes={n: {0: "batch", 1: "sequence"} for n in ["input_ids", "attention_mask", "token_type_ids", output]},
        opset_version=17,
        dynamo=False,
    )


def batch(encodings):
    width = max(len(e.ids) for e in encodings)
    def pad(rows):
        return np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
    return {
        "input_ids": pad([e.ids for e in encodings]),
        "attention_mask": pad([e.attention_mask for e in encodings]),
        "token_type_ids": pad([e.type_ids for e in encodings]),
    }


def main() -> None:
    torch.manual_seed(6)
    tok = tokenizer()
    tok.save(str(HERE / "tokenizer.json"))
    config = BertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=1,
    )
    cross = BertForSequenceClassification(config).eval()
    bi = BertModel(config, add_pooling_layer=False).eval()
    # BERT's initialisation (std 0.02) gives near-equal scores; spread them so ordering is tested.
    with torch.no_grad():
        for module in (cross, bi):
            for p in module.parameters():
                p.mul_(8.0)
    export(cross, HERE / "tiny-cross-encoder.onnx", "logits")
    export(bi, HERE / "tiny-bi-encoder.onnx", "last_hidden_state")

    tok.enable_truncation(max_length=MAX_LENGTH, strategy="only_second")
    pairs = tok.encode_batch(PAIRS)
    cross_session = ort.InferenceSession(str(HERE / "tiny-cross-encoder.onnx"))
    logits = cross_session.run(["logits"], batch(pairs))[0][:, 0]

    tok.enable_truncation(max_length=MAX_LENGTH, strategy="longest_first")
    bi_session = ort.InferenceSession(str(HERE / "tiny-bi-encoder.onnx"))
    def embed(texts):
        inputs = batch(tok.encode_batch(texts))
        hidden = bi_session.run(["last_hidden_state"], inputs)[0]
        mask = inputs["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    queries = embed([q for q, _ in PAIRS])
    passages = embed([p for _, p in PAIRS])
    cosines = (queries * passages).sum(1)

    reference = {
        "max_length": MAX_LENGTH,
        "pairs": [
            {"query": q, "passage": p, "tokens": len(e.ids), "logit": float(l), "cosine": float(c)}
            for (q, p), e, l, c in zip(PAIRS, pairs, logits, cosines)
        ],
    }
    (HERE / "reference.json").write_text(json.dumps(reference, indent=2) + "\n")
    print(json.dumps(reference, indent=2))


if __name__ == "__main__":
    main()
