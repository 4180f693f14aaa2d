"""Haystack side of the orchestration-overhead benchmark: N trivial components in a chain, or a
fan-out of W components and a join; prints microseconds per step of `run` (build excluded) as JSON."""
import json
import sys
import time

from haystack import Pipeline, component
from haystack.core.component.types import Variadic


@component
class Step:
    @component.output_types(text=str)
    def run(self, text: str):
        return {"text": text + "x"}


@component
class Join:
    @component.output_types(text=str)
    def run(self, text: Variadic[str]):
        return {"text": str(len(list(text)))}


def linear(n: int):
    pipe = Pipeline(max_runs_per_component=10)
    for i in range(n):
        pipe.add_component(f"s{i}", Step())
    for i in range(1, n):
        pipe.connect(f"s{i - 1}.text", f"s{i}.text")
    return pipe, {"s0": {"text": ""}}, n


def fanout(width: int):
    pipe = Pipeline(max_runs_per_component=10)
    pipe.add_component("root", Step())
    pipe.add_component("join", Join())
    for i in range(width):
        pipe.add_component(f"b{i}", Step())
        pipe.connect("root.text", f"b{i}.text")
        pipe.connect(f"b{i}.text", "join.text")
    return pipe, {"root": {"text": ""}}, width + 2


def main() -> None:
    kind, size = sys.argv[1], int(sys.argv[2])
    pipe, data, steps = linear(size) if kind == "linear" else fanout(size)
    pipe.run(data)  # warm-up
    # Best of 5, as pagantic's side of benches/overhead.sh reports.
    seconds = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        pipe.run(data)
        seconds = min(seconds, time.perf_counter() - started)
    print(json.dumps({"peer": "haystack", "kind": kind, "size": size, "steps": steps, "us_per_step": seconds * 1e6 / steps}))


if __name__ == "__main__":
    main()
