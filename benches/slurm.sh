#!/usr/bin/env bash
# The scheduler path's overhead: the same 2,000 rows (benches/plans/batch-stalled.yaml: a
# scripted model that takes 10 ms a call) as one process with -j 4, and as 4 Slurm array tasks
# with -j 1 each (examples/slurm/batch.sbatch on the one-node cluster of
# tests/scale/slurm-cluster.sh, 4 CPUs declared) followed by `batch merge`. The array is timed
# from sbatch until every task's summary is on disk (what a pipeline waiting on shared storage
# sees), then the merge. Three runs each; prints each wall time and the median.
#
#   bash benches/slurm.sh       # PAGANTIC_BIN=path uses that binary instead of building
#
# The dev build (the profile of the README commands). Needs root or sudo for the daemons'
# packages when missing (apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PAGANTIC_BIN:-$(realpath -m "${CARGO_TARGET_DIR:-target}")/debug/pagantic}
[ -n "${PAGANTIC_BIN:-}" ] || cargo build --locked --quiet
source tests/scale/slurm-cluster.sh
work=$(mktemp -d /tmp/pagantic-slurm-bench.XXXXXX)
trap 'scancel --quiet --user="$(id -un)" 2>/dev/null || true; stop_cluster; rm -rf "$work"' EXIT
start_cluster "$work/cluster" 4
python3 -c 'import json
for i in range(2000): print(json.dumps({"id": f"r{i}", "text": f"review {i}"}))' >"$work/input.jsonl"
export PLAN=$PWD/benches/plans/batch-stalled.yaml INPUT=$work/input.jsonl ID_COLUMN=id PAGANTIC=$bin
now() { date +%s.%N; }
one_process() {
  rm -f "$work/one.jsonl"
  local start
  start=$(now)
  "$bin" run "$PLAN" --batch "$INPUT" --id id -j 4 --quiet --no-cache --out "$work/one.jsonl"
  echo "$(now) - $start" | bc
}
array() {
  local out=$work/out-$1 start job
  mkdir -p "$out"
  start=$(now)
  job=$(OUT_DIR=$out PAGANTIC_JOBS=1 PAGANTIC_CACHE_DIR=$work/cache-$1 sbatch --parsable \
    --array=1-4 --output="$work/task-%a.out" examples/slurm/batch.sbatch)
  local deadline=$((SECONDS + 300))
  until [ "$(ls "$out"/summary-*-try0.json 2>/dev/null | wc -l)" -eq 4 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "the array did not finish within 300 s" >&2; exit 1; }
    sleep 0.05
  done
  local ran
  ran=$(echo "$(now) - $start" | bc)
  "$bin" batch merge "$out"/part-*-of-4.jsonl --expect 2000 --out "$work/merged-$1.jsonl" 2>/dev/null
  echo "$ran $(echo "$(now) - $start" | bc)"
  wait_for_array "$job" 60
}
for run in 1 2 3; do one_process; done >"$work/one.txt"
for run in 1 2 3; do array "$run"; done >"$work/array.txt"
# Each wall time to 0.01 s, and the median of the three.
show() { # label, file of times
  printf '  %-28s %s s — median %.2f s\n' "$1" "$(xargs printf '%.2f ' <"$2")" "$(sort -n "$2" | sed -n 2p)"
}
cut -d' ' -f1 "$work/array.txt" >"$work/array-wall.txt"
cut -d' ' -f2 "$work/array.txt" >"$work/merged-wall.txt"
echo "2,000 rows, model 10 ms a call, on $(nproc) cores (load average $(cut -d' ' -f1 /proc/loadavg)):"
show "one process, -j 4:" "$work/one.txt"
show "4 Slurm tasks, -j 1 each:" "$work/array-wall.txt"
show "4 Slurm tasks, then merged:" "$work/merged-wall.txt"
