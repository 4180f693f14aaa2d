#!/usr/bin/env bash
# Where the local engine's time goes: `perf record` over one run of `examples/local_speed` (load,
# prefill, decode, 8 concurrent requests) on the derived Q8_0 file, pinned to two cores, then the
# sampled time grouped into a few buckets by the symbol it was spent in.
#
#   bash benches/profile.sh
#
# Needs `perf` and the embedded model pulled (`cargo run -- models pull`). Each sample goes to the
# first bucket that matches, in the order printed: `kernel` when its innermost frame is in the
# operating system (scheduling, page faults, file reads); otherwise the first of the others that
# any frame of its call stack matches:
#   model load         mistral.rs reading the GGUF and building tensors (`gguf`, `load_model`)
#   tokenizer/grammar  `tokenizers`, `toktrie`, `llguidance`
#   attention          mistral.rs's CPU attention (`vec_dot_f32`, `softmax`, `attention`, `sdpa`)
#   quantized matmul   candle's quantized kernels (`k_quants`, `QMatMul`, `vec_dot`, `matmul`)
#   rayon pool         rayon's thread pool itself, innermost (`rayon`, `crossbeam`, `sched_yield`)
#   rayon work items   closures run by rayon whose stack was cut short before their caller: mostly
#                      candle's kernels (stacks are walked by frame pointer, and the optimised
#                      dependencies keep none, so the buckets are a guide, not exact)
#   other              everything else
# It then prints the 15 innermost symbols with the most samples; `perf report -i
# target/bench-profile/perf.data` opens the whole profile.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }
cargo build --locked --quiet --example local_speed
out=target/bench-profile
mkdir -p "$out"
taskset -c 0,1 perf record -q -F 499 -g -o "$out/perf.data" ./target/debug/examples/local_speed >"$out/speed.json"
echo "local_speed: $(cat "$out/speed.json")"
perf script -i "$out/perf.data" -F period,ip,sym,dso 2>/dev/null |
  python3 -c '
import collections, re, sys
buckets = [
    ("model load", re.compile(r"gguf|load_model", re.I)),
    ("tokenizer/grammar", re.compile(r"tokenizers|toktrie|llguidance")),
    ("attention", re.compile(r"vec_dot_f32|softmax|attention|sdpa", re.I)),
    ("quantized matmul", re.compile(r"k_quants|QMatMul|vec_dot|matmul|gemm", re.I)),
]
pool = re.compile(r"rayon|crossbeam|sched_yield")
shares = collections.Counter()
innermost = collections.Counter()
total = 0

def settle(period, frames):
    global total
    if not frames:
        return
    total += period
    innermost[frames[0]] += period
    if "[kernel" in frames[0]:
        shares["kernel"] += period
        return
    for name, pattern in buckets:
        if any(pattern.search(frame) for frame in frames):
            shares[name] += period
            return
    if pool.search(frames[0]):
        shares["rayon pool"] += period
    elif any(pool.search(frame) for frame in frames):
        shares["rayon work items"] += period
    else:
        shares["other"] += period

period, frames = 0, []
for line in sys.stdin:
    if not line.strip():
        settle(period, frames)
        period, frames = 0, []
    elif line.startswith("\t"):
        parts = line.split(None, 1)
        frames.append(parts[1].strip() if len(parts) > 1 else "?")
    else:
        period = int(line.split()[0])
settle(period, frames)
for name in ["kernel"] + [name for name, _ in buckets] + ["rayon pool", "rayon work items", "other"]:
    print(f"{name:<20} {100 * shares[name] / total:5.1f}%")
print()
print("innermost symbols:")
for frame, count in innermost.most_common(15):
    print(f"{100 * count / total:5.1f}%  {frame[:110]}")
'
