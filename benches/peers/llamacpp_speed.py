"""llama.cpp side of the local-model speed benchmark (llama-cpp-python), same GGUF, same threads,
same prompts as examples/local_speed.rs. Prints one JSON object.

    python benches/peers/llamacpp_speed.py MODEL.gguf [THREADS]
"""
import json
import sys
import time

from llama_cpp import Llama


def long_prompt() -> str:
    paragraph = (
        "pagantic is a declarative pipeline runner for LLM work. People describe a pipeline once, "
        "in a YAML plan file: retrieve passages, rerank them with a cross-encoder, infer with a local model, "
        "force schema-valid JSON, vote across several answers, run an agent's tool loop, and validate. "
    )
    return paragraph * 10 + "\nSummarise the text above in one word."


def chat(llm: Llama, prompt: str, max_tokens: int):
    started = time.perf_counter()
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0
    )
    return out, time.perf_counter() - started


def main() -> None:
    path = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    started = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - started
    chat(llm, "Hello", 4)  # warm-up
    # Prefill: one generated token, so the time is the prompt's (minus one decode step).
    llm.reset()
    out, seconds = chat(llm, long_prompt(), 1)
    prefill_tokens = out["usage"]["prompt_tokens"]
    prefill_tps = prefill_tokens / seconds
    llm.reset()
    # Decode: time 128 tokens after a short prompt, minus the prompt's share measured apart.
    short = "Write a long story about a lighthouse keeper."
    _, prompt_only = chat(llm, short, 1)
    llm.reset()
    out, seconds = chat(llm, short, 128)
    decode_tokens = out["usage"]["completion_tokens"]
    decode_tps = max(decode_tokens - 1, 1) / max(seconds - prompt_only, 1e-9)
    # llama-cpp-python serves one request at a time: 8 requests run back to back. No reset between
    # them: like pagantic's prefix cache, llama.cpp reuses the prompt prefix it shares with the
    # request before (the chat template's preamble).
    wall = time.perf_counter()
    generated = 0
    for i in range(8):
        out, _ = chat(llm, f"Write Python function number {i}: a linked list with comments.", 64)
        generated += out["usage"]["completion_tokens"]
    concurrent_tps = generated / (time.perf_counter() - wall)
    print(json.dumps({
        "engine": "llama.cpp (llama-cpp-python)",
        "model": path,
        "threads": threads,
        "load_s": load_s,
        "prefill_tokens": prefill_tokens,
        "prefill_tok_per_s": prefill_tps,
        "decode_tokens": decode_tokens,
        "decode_tok_per_s": decode_tps,
        "concurrent_8_tokens": generated,
        "concurrent_8_tok_per_s": concurrent_tps,
    }))


if __name__ == "__main__":
    main()
