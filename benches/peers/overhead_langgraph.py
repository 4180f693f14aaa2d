"""LangGraph side of the orchestration-overhead benchmark: N trivial nodes in a chain, or a
fan-out of W nodes and a join; prints microseconds per step of `invoke` (compile excluded) as JSON."""
import json
import sys
import time
from typing import Annotated, TypedDict
import operator

from langgraph.graph import END, START, StateGraph


class Chain(TypedDict):
    text: str


class Fan(TypedDict):
    text: str
    parts: Annotated[list, operator.add]


def linear(n: int):
    graph = StateGraph(Chain)
    for i in range(n):
        graph.add_node(f"s{i}", lambda state: {"text": state["text"] + "x"})
    graph.add_edge(START, "s0")
    for i in range(1, n):
        graph.add_edge(f"s{i - 1}", f"s{i}")
    graph.add_edge(f"s{n - 1}", END)
    return graph.compile(), {"text": ""}, n


def fanout(width: int):
    graph = StateGraph(Fan)
    graph.add_node("root", lambda state: {"text": "x"})
    for i in range(width):
        graph.add_node(f"b{i}", lambda state, i=i: {"parts": [state["text"] + str(i)]})
        graph.add_edge("root", f"b{i}")
    graph.add_node("join", lambda state: {"text": str(len(state["parts"]))})
    graph.add_edge(START, "root")
    graph.add_edge([f"b{i}" for i in range(width)], "join")
    graph.add_edge("join", END)
    return graph.compile(), {"text": "", "parts": []}, width + 2


def main() -> None:
    kind, size = sys.argv[1], int(sys.argv[2])
    app, state, steps = linear(size) if kind == "linear" else fanout(size)
    app.invoke(state, {"recursion_limit": steps + 10})  # warm-up
    # Best of 5, as pagantic's side of benches/overhead.sh reports.
    seconds = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        app.invoke(state, {"recursion_limit": steps + 10})
        seconds = min(seconds, time.perf_counter() - started)
    print(json.dumps({"peer": "langgraph", "kind": kind, "size": size, "steps": steps, "us_per_step": seconds * 1e6 / steps}))


if __name__ == "__main__":
    main()
