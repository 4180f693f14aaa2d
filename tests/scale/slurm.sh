#!/usr/bin/env bash
# The worker contract on a live Slurm cluster (docs/cluster.md): a one-node cluster on this
# machine (tests/scale/slurm-cluster.sh: munged, slurmctld, slurmd, loopback only, state in a
# temporary directory), and a 2,000-row batch submitted as `sbatch --array=1-4 --requeue` with the
# example job script (examples/slurm/batch.sbatch) against a stand-in OpenAI server
# (tests/scale/stub_openai.py). Task 2 is preempted part-way with `scancel --signal=TERM` (once
# its part holds 100 rows); task 3's model answers 429 to its first requests, so some of its rows
# fail retryably. Both exit 75 and are requeued by the cluster; each resumes its part. Then the
# parts are merged and the script asserts: 2,000 rows, each exactly once, none lost; the exit
# code of every try (from its summary) and Slurm's restarts; that the preempted task's second try
# ran only the rows its first did not write.
#
#   bash tests/scale/slurm.sh      # run by .ci/run; PAGANTIC_BIN overrides the debug build
#
# Every process it starts (daemons, the stub) is stopped by PID however it ends; when a daemon
# cannot start it fails within seconds naming it, with its log's last lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
bin=${PAGANTIC_BIN:-$target/debug/pagantic}
[ -x "$bin" ] || cargo build --locked --quiet
source tests/scale/slurm-cluster.sh

work=$(mktemp -d /tmp/pagantic-slurm.XXXXXX)
stub_pid=""
finish() {
  local status=$?
  [ -z "$stub_pid" ] || kill "$stub_pid" 2>/dev/null || true
  [ -z "$stub_pid" ] || wait "$stub_pid" 2>/dev/null || true
  # Bounded: a controller that no longer answers must not hold the teardown up.
  if [ -n "${SLURM_CONF:-}" ]; then timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null || true; fi
  stop_cluster
  if [ "$status" -ne 0 ]; then
    echo "slurm.sh: failed; the task logs:" >&2
    tail -n 5 "$work"/logs/*.out >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM
fail() {
  echo "slurm.sh: $*" >&2
  exit 1
}

started=$SECONDS
start_cluster "$work/cluster" 4 || fail "the cluster did not start"
echo "slurm.sh: cluster up in $((SECONDS - started)) s ($(sinfo -h -o '%N %c CPUs %t'))"

# Rows r0…r1999; rows of shard 2 (task 3) are refused 40 times with 429 before they are answered.
mkdir -p "$work"/{out,logs,cache}
python3 -c 'import json
for i in range(2000): print(json.dumps({"id": f"r{i}", "text": f"review {i}"}))' >"$work/input.jsonl"
python3 tests/scale/stub_openai.py "$work/stub.port" "$work/stub.counts" 0.02 4 2 40 &
stub_pid=$!
wait_until 10 test -s "$work/stub.port" || fail "the stub server did not start"
cat >"$work/plan.yaml" <<PLAN
version: 1
name: label
inputs:
  text: { type: string }
models:
  stub: { kind: openai, base_url: "http://127.0.0.1:$(cat "$work/stub.port")/v1", model: stub }
steps:
  - name: label
    type: infer
    model: stub
    template: "{{ row.id }}: {{ inputs.text }}"
PLAN

export PLAN="$work/plan.yaml" INPUT="$work/input.jsonl" OUT_DIR="$work/out" ID_COLUMN=id
export PAGANTIC="$bin" PAGANTIC_JOBS=2 PAGANTIC_CACHE_DIR="$work/cache"
job=$(sbatch --parsable --array=1-4 --requeue --output="$work/logs/task-%a-%j.out" \
  examples/slurm/batch.sbatch)
echo "slurm.sh: submitted array job $job"

# Preempt task 2 (shard 1) once its part holds 100 rows.
part1="$work/out/part-1-of-4.jsonl"
lines_in() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
wait_until 120 lines_in "$part1" 100 || fail "task 2 wrote no 100 rows within 120 s"
scancel --batch --signal=TERM "${job}_2"
echo "slurm.sh: sent SIGTERM to task 2 with $(wc -l <"$part1") rows in its part"

wait_for_array "$job" 240 || fail "the array did not end within 240 s: $(array_tasks "$job")"
echo "slurm.sh: every task ended; task state restarts exit-code:"
array_tasks "$job" | sort -n | sed 's/^/  /'

# Slurm's view: every task ended COMPLETED with exit 0, tasks 2 and 3 after one requeue.
while read -r task state restarts exit_code _; do
  [ "$state" = COMPLETED ] && [ "$exit_code" = 0:0 ] || fail "task $task ended $state $exit_code"
  want=0
  case "$task" in 2 | 3) want=1 ;; esac
  [ "$restarts" -eq "$want" ] || fail "task $task was requeued $restarts times, not $want"
done < <(array_tasks "$job")

kill "$stub_pid"
wait "$stub_pid" || true
stub_pid=""

"$bin" batch merge "$work"/out/part-*-of-4.jsonl --input "$INPUT" --id id \
  --out "$work/merged.jsonl" --summary "$work/merged.json" ||
  fail "batch merge says the batch is incomplete (exit $?)"

python3 - "$work" <<'PY'
import collections, glob, json, os, sys
work = sys.argv[1]
def fail(message):
    sys.exit(f"slurm.sh: {message}")
rows = [json.loads(line) for line in open(f"{work}/merged.jsonl")]
ids = collections.Counter(row["row"] for row in rows)
if len(rows) != 2000 or len(ids) != 2000 or set(ids) != {f"r{i}" for i in range(2000)}:
    fail(f"the merged output has {len(rows)} lines for {len(ids)} ids, not 2,000 rows once each")
if any(row["status"] != "ok" for row in rows):
    fail("a row failed: " + next(json.dumps(r) for r in rows if r["status"] != "ok"))
merged = json.load(open(f"{work}/merged.json"))
if not merged["complete"] or merged["missing"] or merged["conflicts"] or merged["rows_ok"] != 2000:
    fail(f"the merged summary: {merged}")
tries = {}
for path in glob.glob(f"{work}/out/summary-*-of-4-try*.json"):
    name = os.path.basename(path)
    shard, attempt = int(name.split("-")[1]), int(name.rsplit("try", 1)[1].split(".")[0])
    tries[(shard, attempt)] = json.load(open(path))
seen = {key: (s["end"], s["exit_code"]) for key, s in sorted(tries.items())}
expected = {(0, 0): ("complete", 0), (1, 0): ("preempted", 75), (1, 1): ("complete", 0),
            (2, 0): ("retry", 75), (2, 1): ("complete", 0), (3, 0): ("complete", 0)}
if seen != expected:
    fail(f"the tries ended {seen}, expected {expected}")
for (shard, attempt), s in tries.items():
    if s["shard"]["index"] != shard or s["shard"]["count"] != 4 or s["shard"]["from"] != "SLURM_ARRAY_TASK_ID":
        fail(f"try {attempt} of shard {shard} names the shard {s['shard']}")
    if not s["input_sha256"] or not s["plan_sha256"]:
        fail(f"try {attempt} of shard {shard} has no input or plan SHA-256")
first, second = tries[(1, 0)], tries[(1, 1)]
written = first["rows_ok"] + first["rows_failed"]
if second["rows_skipped"] != written or written + second["rows_ok"] != 500:
    fail(f"the preempted task wrote {written} rows, then skipped {second['rows_skipped']} and ran {second['rows_ok']}")
if second["model_calls"] != second["rows_ok"]:
    fail(f"the preempted task's second try made {second['model_calls']} calls for {second['rows_ok']} rows")
retry = tries[(2, 0)]
if retry["rows_failed_retryably"] == 0 or retry["rows_failed"] != retry["rows_failed_retryably"]:
    fail(f"task 3's first try: {retry['rows_failed']} failed, {retry['rows_failed_retryably']} retryably")
if tries[(2, 1)]["rows_ok"] != retry["rows_failed_retryably"]:
    fail("task 3's second try did not run exactly the rows that failed retryably")
counts = json.load(open(f"{work}/stub.counts"))
answers = sum(counts["answered"].values())
in_flight = answers - 2000
if not 0 <= in_flight <= 2:
    fail(f"the model answered {answers} times for 2,000 rows (at most the 2 rows in flight at the preemption run twice)")
print(f"slurm.sh: 2,000 rows merged, each once; the preempted task wrote {written} rows and its requeue "
      f"ran the other {second['rows_ok']}; task 3 failed {retry['rows_failed_retryably']} rows retryably "
      f"({counts['refused']} 429s), then its requeue ran them; {answers} model answers in all")
PY
echo "slurm.sh: passed in $((SECONDS - started)) s"
