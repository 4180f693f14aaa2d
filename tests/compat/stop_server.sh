# Sourced by the compat scripts. The daemon a script starts, its PID in `server`, is stopped
# however the script ends, and the script's own exit status is kept: the daemon's (143, killed by
# TERM) is not the script's result. Ctrl-C or a TERM ends the script, and so the daemon, too.
server=
stop_server() {
  local status=$?
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  exit "$status"
}
trap stop_server EXIT
trap 'exit 130' INT TERM
