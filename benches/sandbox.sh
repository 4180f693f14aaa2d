#!/usr/bin/env bash
# What a tool's sandbox costs per call: a plan of 50 command-tool steps in a chain (each runs
# `true`, granted nothing, so every limit the machine allows is set up), run with the sandboxes
# on and off (PAGANTIC_SANDBOX=off) in turn, ROUNDS times each. The figure is each call's own
# `duration_ms` from its `tool_end` event (spawn, the sandbox's set-up, the program, its exit and
# the sweep of what it left), as the median over every call of every round: on, off, and their
# difference, the containment's cost per call.
#
#   bash benches/sandbox.sh                  # the debug build in target/ (cargo build first)
#   PAGANTIC=path/to/pagantic ROUNDS=10 bash benches/sandbox.sh
#
# `pagantic-sandbox` must be beside the `pagantic` measured. The first line says what this
# machine enforces (from `pagantic tools`): a limit it cannot enforce costs nothing here.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${PAGANTIC:-${CARGO_TARGET_DIR:-target}/debug/pagantic}"
rounds="${ROUNDS:-5}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  printf 'version: 1\nname: sandbox-cost\ntools:\n  nothing:\n    kind: command\n'
  printf '    description: Does nothing.\n    argv: ["true"]\n    side_effects: none\nsteps:\n'
  for i in $(seq 1 50); do
    printf '  - { name: call%s, type: tool, tool: nothing }\n' "$i"
  done
} > "$work/plan.yaml"
"$bin" tools "$work/plan.yaml" | sed -n 2p
for round in $(seq 1 "$rounds"); do
  "$bin" run -q --format json --events "$work/on-$round.jsonl" "$work/plan.yaml" > /dev/null
  PAGANTIC_SANDBOX=off "$bin" run -q --format json --events "$work/off-$round.jsonl" "$work/plan.yaml" > /dev/null
done
python3 - "$work" <<'PY'
import glob, json, statistics, sys
def calls(kind):
    return [json.loads(line)["data"]["duration_ms"]
            for path in glob.glob(f"{sys.argv[1]}/{kind}-*.jsonl")
            for line in open(path) if '"tool_end"' in line]
on, off = calls("on"), calls("off")
print(f"calls: {len(on)} sandboxed, {len(off)} not")
print(f"median per call: sandboxed {statistics.median(on):.2f} ms, not {statistics.median(off):.2f} ms, "
      f"containment {statistics.median(on) - statistics.median(off):.2f} ms")
PY
