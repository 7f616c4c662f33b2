# The static part of bootstrap.sh (theseus). It only reads the variables set above it:
# theseus_launch, theseus_coordinator_port, theseus_identity_json, theseus_python_entry,
# theseus_jax, theseus_args, theseus_uv_groups and the exported THESEUS_* values.

theseus_is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

cd -- "$THESEUS_WORK_DIR"
mkdir -p -- "$THESEUS_RUN_DIR"

# ---- rank wiring ----
theseus_rank=0
theseus_count=1
theseus_local_rank=0
theseus_coordinator=""
case "$theseus_launch" in
  single) ;;
  local)
    theseus_rank=${THESEUS_LOCAL_RANK:-0}
    theseus_count=${THESEUS_LOCAL_WORLD_SIZE:-1}
    theseus_local_rank=$theseus_rank
    theseus_coordinator="127.0.0.1:$theseus_coordinator_port"
    # Keep the JAX coordinator on loopback (it binds to all interfaces by default).
    export JAX_COORDINATOR_BIND_ADDRESS="$theseus_coordinator"
    ;;
  volcano)
    theseus_hosts=()
    theseus_host_file=${THESEUS_VOLCANO_HOST_FILE:-/etc/volcano/worker.host}
    if [[ -n "${VC_WORKER_HOSTS:-}" ]]; then
      IFS=',' read -r -a theseus_hosts <<< "$VC_WORKER_HOSTS"
    elif [[ -r "$theseus_host_file" ]]; then
      mapfile -t theseus_hosts < "$theseus_host_file"
    else
      theseus_die "volcano: neither VC_WORKER_HOSTS nor $theseus_host_file gives the worker hosts"
    fi
    theseus_first_host=""
    theseus_count=0
    for theseus_h in ${theseus_hosts[@]+"${theseus_hosts[@]}"}; do
      theseus_h=${theseus_h//[[:space:]]/}
      [[ -n "$theseus_h" ]] || continue
      [[ -n "$theseus_first_host" ]] || theseus_first_host=$theseus_h
      theseus_count=$((theseus_count + 1))
    done
    [[ -n "$theseus_first_host" ]] || theseus_die "volcano: the worker host list is empty"
    [[ -n "${VC_TASK_INDEX:-}" ]] || theseus_die "volcano: VC_TASK_INDEX is not set"
    theseus_rank=$VC_TASK_INDEX
    theseus_coordinator="$theseus_first_host:$theseus_coordinator_port"
    ;;
  slurm)
    [[ -n "${SLURM_PROCID:-}" ]] || theseus_die "slurm: SLURM_PROCID is not set (run the bootstrap with srun)"
    theseus_rank=$SLURM_PROCID
    theseus_count=${SLURM_NTASKS:-1}
    theseus_local_rank=${SLURM_LOCALID:-0}
    theseus_first_host=""
    theseus_nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
    if [[ -n "${THESEUS_COORDINATOR_ADDRESS:-}" ]]; then
      theseus_first_host=override
    fi
    if [[ -z "$theseus_first_host" && -n "$theseus_nodelist" ]] && command -v scontrol > /dev/null 2>&1; then
      theseus_first_host=$(scontrol show hostnames "$theseus_nodelist" 2> /dev/null | head -n1 || true)
    fi
    if [[ -z "$theseus_first_host" && -n "$theseus_nodelist" ]]; then
      # Without scontrol: the first name of `a,b` or `prefix[01-04,7],c`.
      theseus_prefix=${theseus_nodelist%%[\[,]*}
      theseus_rest=${theseus_nodelist:${#theseus_prefix}}
      if [[ "$theseus_rest" == \[* ]]; then
        theseus_rest=${theseus_rest#\[}
        theseus_first_host="$theseus_prefix${theseus_rest%%[-,\]]*}"
      else
        theseus_first_host=$theseus_prefix
      fi
    fi
    if [[ -z "$theseus_first_host" ]]; then
      theseus_first_host=${SLURM_LAUNCH_NODE_IPADDR:-}
    fi
    [[ -n "$theseus_first_host" ]] || theseus_die "slurm: cannot find the first node (SLURM_JOB_NODELIST is empty)"
    theseus_coordinator="$theseus_first_host:$theseus_coordinator_port"
    ;;
  *) theseus_die "unknown launch scheme $theseus_launch" ;;
esac
if [[ -n "$theseus_coordinator" && -n "${THESEUS_COORDINATOR_ADDRESS:-}" ]]; then
  # An explicit override, for clusters whose node names do not resolve.
  theseus_coordinator=$THESEUS_COORDINATOR_ADDRESS
fi
theseus_is_uint "$theseus_rank" || theseus_die "the process rank is not a number: $theseus_rank"
theseus_is_uint "$theseus_count" || theseus_die "the process count is not a number: $theseus_count"
theseus_is_uint "$theseus_local_rank" || theseus_die "the local rank is not a number: $theseus_local_rank"
# Base 10 even with leading zeros.
theseus_rank=$((10#$theseus_rank)) theseus_count=$((10#$theseus_count)) theseus_local_rank=$((10#$theseus_local_rank))
((theseus_rank < theseus_count)) || theseus_die "rank $theseus_rank is not below the process count $theseus_count"
export THESEUS_PROCESS_ID=$theseus_rank THESEUS_NUM_PROCESSES=$theseus_count
export RANK=$theseus_rank WORLD_SIZE=$theseus_count LOCAL_RANK=$theseus_local_rank
if [[ -n "$theseus_coordinator" ]]; then
  export JAX_COORDINATOR_ADDRESS=$theseus_coordinator
  export JAX_NUM_PROCESSES=$theseus_count JAX_PROCESS_ID=$theseus_rank
  export MASTER_ADDR=${theseus_coordinator%:*} MASTER_PORT=${theseus_coordinator##*:}
fi
theseus_log "process $theseus_rank of $theseus_count (${theseus_launch})${theseus_coordinator:+, coordinator $theseus_coordinator}"

# ---- metadata ----
if ((theseus_rank == 0)); then
  theseus_metadata="$THESEUS_RUN_DIR/metadata.json"
else
  theseus_metadata="$THESEUS_RUN_DIR/metadata.rank-$theseus_rank.json"
fi
theseus_hostname=${HOSTNAME:-$(uname -n)}
theseus_hostname=${theseus_hostname//[[:cntrl:]]/}
theseus_hostname=${theseus_hostname//\\/\\\\}
theseus_hostname=${theseus_hostname//\"/\\\"}
theseus_start_time=$(date -u +%Y-%m-%dT%H:%M:%SZ)
theseus_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# theseus_write_metadata STATUS [EXIT_CODE]: rewrites the metadata file atomically.
theseus_write_metadata() {
  local status=$1 code=${2:-null} tmp="$theseus_metadata.tmp.$BASHPID"
  {
    printf '{\n%s' "$theseus_identity_json"
    printf '  "rank": %d,\n  "num_processes": %d,\n' "$theseus_rank" "$theseus_count"
    printf '  "hostname": "%s",\n  "pid": %d,\n' "$theseus_hostname" "$$"
    printf '  "start_time": "%s",\n  "last_heartbeat": "%s",\n' "$theseus_start_time" "$(theseus_now)"
    printf '  "status": "%s",\n  "exit_code": %s\n}\n' "$status" "$code"
  } > "$tmp"
  mv -f -- "$tmp" "$theseus_metadata"
}

# ---- python ----
theseus_py=("${THESEUS_PYTHON:-python3}")
if [[ -f pyproject.toml ]]; then
  if command -v uv > /dev/null 2>&1; then
    theseus_uv=$(command -v uv)
  elif [[ -x "$HOME/.local/bin/uv" ]]; then
    theseus_uv="$HOME/.local/bin/uv"
  else
    theseus_log "uv is not installed; running: python3 -m pip install --user uv"
    python3 -m pip install --user uv >&2
    theseus_uv="$(python3 -m site --user-base)/bin/uv"
    [[ -x "$theseus_uv" ]] || theseus_die "uv is still missing after pip install --user uv"
  fi
  if [[ -f uv.lock ]]; then
    theseus_log "uv sync --frozen${theseus_uv_groups[@]+$(printf ' %q' "${theseus_uv_groups[@]}")}"
    if ! "$theseus_uv" sync --frozen ${theseus_uv_groups[@]+"${theseus_uv_groups[@]}"} >&2; then
      theseus_die "uv sync --frozen failed; if uv.lock is out of date, run uv lock and submit again"
    fi
  else
    theseus_log "uv sync${theseus_uv_groups[@]+$(printf ' %q' "${theseus_uv_groups[@]}")} (no uv.lock)"
    "$theseus_uv" sync ${theseus_uv_groups[@]+"${theseus_uv_groups[@]}"} >&2
  fi
  theseus_py=("$theseus_uv" run --no-sync python)
fi

# ---- the job ----
if ((theseus_python_entry)); then
  theseus_cmd=("${theseus_py[@]}" "$THESEUS_WORK_DIR/.theseus/launcher.py")
  if ((theseus_jax)); then theseus_cmd+=(--jax); fi
  theseus_cmd+=(-- ${theseus_args[@]+"${theseus_args[@]}"})
else
  theseus_cmd=("${theseus_args[@]}")
fi

theseus_child=""
theseus_heartbeat=""
theseus_finished=0

theseus_stop_heartbeat() {
  if [[ -n "$theseus_heartbeat" ]]; then
    kill -TERM "$theseus_heartbeat" 2> /dev/null || true
    wait "$theseus_heartbeat" 2> /dev/null || true
    rm -f -- "$theseus_metadata.tmp.$theseus_heartbeat"
    theseus_heartbeat=""
  fi
}

# theseus_finish STATUS CODE: final metadata, then exit with CODE.
theseus_finish() {
  theseus_finished=1
  theseus_stop_heartbeat
  theseus_write_metadata "$1" "$2" || theseus_log "cannot write $theseus_metadata"
  exit "$2"
}

# theseus_on_signal NAME CODE: forwards TERM to the job, waits briefly, records preemption.
theseus_on_signal() {
  trap '' TERM INT HUP
  theseus_log "received SIG$1; stopping the job"
  if [[ -n "$theseus_child" ]]; then
    kill -TERM "$theseus_child" 2> /dev/null || true
    local grace=${THESEUS_TERM_GRACE_SECONDS:-10} i=0
    theseus_is_uint "$grace" || grace=10
    while kill -0 "$theseus_child" 2> /dev/null && ((i < grace * 10)); do
      sleep 0.1
      i=$((i + 1))
    done
    if kill -0 "$theseus_child" 2> /dev/null; then
      theseus_log "the job did not stop within ${grace}s; killing it"
      kill -KILL "$theseus_child" 2> /dev/null || true
    fi
    wait "$theseus_child" 2> /dev/null || true
  fi
  theseus_finish preempted "$2"
}

theseus_on_exit() {
  local rc=$?
  if ((!theseus_finished)); then
    theseus_finished=1
    theseus_stop_heartbeat
    if [[ -n "$theseus_child" ]]; then kill -TERM "$theseus_child" 2> /dev/null || true; fi
    theseus_write_metadata failed "$rc" 2> /dev/null || true
  fi
}

theseus_heartbeat_loop() {
  local interval=${THESEUS_HEARTBEAT_SECONDS:-30} sleeper=""
  # A positive number of seconds, else the default (never a busy loop).
  if ! [[ "$interval" =~ ^[0-9]*[.]?[0-9]+$ && "$interval" =~ [1-9] ]]; then interval=30; fi
  trap '[[ -z "$sleeper" ]] || kill "$sleeper" 2> /dev/null; exit 0' TERM
  trap - ERR INT HUP EXIT
  while :; do
    sleep "$interval" < /dev/null > /dev/null 2>&1 &
    sleeper=$!
    wait "$sleeper" || true
    theseus_write_metadata running || true
  done
}

trap 'theseus_on_signal TERM 143' TERM
trap 'theseus_on_signal INT 130' INT
trap 'theseus_on_signal HUP 129' HUP
trap theseus_on_exit EXIT

theseus_write_metadata running
theseus_heartbeat_loop > /dev/null &
theseus_heartbeat=$!

theseus_log "running:$(printf ' %q' "${theseus_cmd[@]}")"
"${theseus_cmd[@]}" &
theseus_child=$!
theseus_rc=0
wait "$theseus_child" || theseus_rc=$?
if ((theseus_rc == 0)); then
  theseus_finish completed 0
else
  theseus_log "the job exited with $theseus_rc"
  theseus_finish failed "$theseus_rc"
fi
