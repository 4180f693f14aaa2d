#!/usr/bin/env bash
# How long `pagantic validate` takes per plan, process start included, side by side with a peer.
#
#   bash benches/validate.sh
#
# Needs hyperfine (Debian package `hyperfine`). The peer is promptflow's `pf flow validate` on the
# equivalent 3-node flow in benches/peers/promptflow; it is measured when `pf` is on PATH or when
# PF_VENV points at a virtualenv holding it, e.g.:
#   python3 -m venv /tmp/pfvenv && /tmp/pfvenv/bin/pip install promptflow==1.18.5
#   PF_VENV=/tmp/pfvenv bash benches/validate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hyperfine >/dev/null || { echo "install hyperfine first (apt-get install hyperfine)" >&2; exit 1; }
cargo build --release --locked --quiet
bin=./target/release/pagantic
all_plans=(plans/*.yaml)
commands=(
  "$bin --version"
  "$bin validate -q plans/rag.yaml"
  "$bin validate -q ${all_plans[*]}"
  "$bin validate -q benches/peers/pagantic/three-steps.yaml"
)
pf=""
if [ -n "${PF_VENV:-}" ] && [ -x "$PF_VENV/bin/pf" ]; then pf="$PF_VENV/bin/pf"; fi
if [ -z "$pf" ] && command -v pf >/dev/null; then pf=$(command -v pf); fi
if [ -n "$pf" ]; then
  # A private promptflow home with telemetry off: no network calls, the user's config untouched.
  export PF_HOME_DIRECTORY="$PWD/target/pf-home"
  "$pf" config set telemetry.enabled=false >/dev/null
  "$pf" flow validate --source benches/peers/promptflow >/dev/null
  commands+=("$pf flow validate --source benches/peers/promptflow")
else
  echo "(promptflow not found: measuring pagantic only; see the header of this script)" >&2
fi
hyperfine -N --warmup 3 --runs 30 "${commands[@]}"
