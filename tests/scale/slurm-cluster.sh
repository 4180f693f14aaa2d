# A one-node Slurm cluster on this machine, for tests/scale/slurm.sh and benches/slurm.sh (sourced,
# not run). `start_cluster DIR CPUS` installs slurm-wlm and munge from Debian when missing, then
# starts munged, slurmctld and slurmd in the foreground (their PIDs kept in CLUSTER_PIDS), with
# every file under DIR, listening on loopback only, and waits (bounded) until the node is idle:
# a daemon that does not come up fails the caller within seconds, naming the daemon and the last
# lines of its log. `stop_cluster` kills exactly the PIDs it started. The cluster requeues a batch
# job that exits 75 by itself (RequeueExit=75), as a site that adopts the contract would.

CLUSTER_PIDS=()

cluster_fail() { # daemon, log directory, message
  echo "slurm cluster: $1 $3; the end of its log and output ($2/$1.*):" >&2
  tail -n 15 "$2/$1.log" "$2/$1.out" >&2 2>/dev/null || true
  return 1
}

install_slurm() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurm-wlm munge >/dev/null
}

# Waits up to $1 seconds for the command that follows to succeed.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# A free loopback TCP port.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A daemon started in the background is alive.
alive() { kill -0 "$1" 2>/dev/null; }

start_cluster() { # dir, cpus
  local dir=$1 cpus=$2 user
  user=$(id -un)
  install_slurm
  mkdir -p "$dir"/{munge,state,spool,log}
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  munged --foreground --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed" >"$dir/log/munged.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  wait_until 10 test -S "$dir/munge/socket" ||
    cluster_fail munged "$dir/log" "did not open its socket within 10 s" || return 1
  cat >"$dir/slurm.conf" <<CONF
ClusterName=pagantic
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
JobRequeue=1
RequeueExit=75
KillWait=10
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=main Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -D -i >"$dir/log/slurmctld.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  local controller=$!
  slurmd -D >"$dir/log/slurmd.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  local node=$!
  local deadline=$((SECONDS + 30))
  until [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; do
    alive "$controller" || { cluster_fail slurmctld "$dir/log" "exited"; return 1; }
    alive "$node" || { cluster_fail slurmd "$dir/log" "exited"; return 1; }
    if [ "$SECONDS" -ge "$deadline" ]; then
      cluster_fail slurmctld "$dir/log" "has no idle node after 30 s" || true
      cluster_fail slurmd "$dir/log" "did not register"
      return 1
    fi
    sleep 0.2
  done
}

stop_cluster() {
  local pid
  for pid in "${CLUSTER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  # A daemon that does not stop within 10 s (slurmd waiting on a stuck job step, say) is killed,
  # so stopping the cluster never hangs whatever state its jobs are in.
  for pid in "${CLUSTER_PIDS[@]}"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
}

# The state of every task of job array $1, one `TASK STATE RESTARTS EXITCODE REASON` line each.
array_tasks() {
  scontrol -o show job "$1" | sed -E 's/.*ArrayTaskId=([^ ]+).*JobState=([^ ]+) Reason=([^ ]+).*Restarts=([0-9]+).*ExitCode=([^ ]+).*/\1 \2 \4 \5 \3/'
}

# Waits up to $2 seconds for every task of array $1 to end. A requeued task waits for its begin
# time (Slurm holds it back a while); it is let go at once so the wait stays short.
wait_for_array() { # job id, seconds
  local deadline=$((SECONDS + $2)) line task state
  while :; do
    local pending=0
    while read -r task state _ _ reason; do
      case "$state" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT) ;;
        *) pending=1 ;;
      esac
      if [ "$state" = PENDING ] && [ "$reason" = BeginTime ]; then
        scontrol update JobId="$1_$task" StartTime=now >/dev/null 2>&1 || true
      fi
    done < <(array_tasks "$1")
    [ "$pending" -eq 0 ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}
