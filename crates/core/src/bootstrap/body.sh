# The static part of bootstrap.sh (theseus). It only reads the variables set above it:
# theseus_launch, theseus_coordinator_port, theseus_identity_json, theseus_python_entry,
# theseus_jax (none|jax|auto), theseus_args, theseus_uv_groups, theseus_batch_search and the
# exported THESEUS_* values.

theseus_is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

cd -- "$THESEUS_WORK_DIR"
mkdir -p -- "$THESEUS_RUN_DIR"
# The shared dirs exist before the job looks (a read-only data mount is fine: only said).
for theseus_d in "$THESEUS_DATA_DIR" "$THESEUS_CHECKPOINTS_DIR" "$THESEUS_RESULTS_DIR"; do
  [[ -d "$theseus_d" ]] || mkdir -p -- "$theseus_d" 2> /dev/null || theseus_log "note: cannot create $theseus_d"
done

# ---- rank wiring ----
theseus_rank=0
theseus_count=1
theseus_local_rank=0
theseus_private_dirs=0
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
  *)
    # A host type's own wiring (`theseus_wire`, rendered above): it sets theseus_rank,
    # theseus_count, theseus_local_rank and theseus_first_host, and theseus_private_dirs=1
    # when each host has a work dir of its own (see the setup below).
    declare -F theseus_wire > /dev/null || theseus_die "unknown launch scheme $theseus_launch"
    theseus_first_host=""
    theseus_wire
    theseus_coordinator="$theseus_first_host:$theseus_coordinator_port"
    ;;
esac
if [[ -n "$theseus_coordinator" && -n "${THESEUS_COORDINATOR_ADDRESS:-}" ]]; then
  # An explicit override, for clusters whose node names do not resolve.
  theseus_coordinator=$THESEUS_COORDINATOR_ADDRESS
fi
theseus_is_uint "$theseus_rank" || theseus_die "the process rank is not a number: $theseus_rank"
theseus_is_uint "$theseus_count" || theseus_die "the process count is not a number: $theseus_count"
theseus_is_uint "$theseus_local_rank" || theseus_die "the local rank is not a number: $theseus_local_rank"
[[ "$theseus_private_dirs" == [01] ]] || theseus_die "theseus_private_dirs is not 0 or 1: $theseus_private_dirs"
# Base 10 even with leading zeros.
theseus_rank=$((10#$theseus_rank)) theseus_count=$((10#$theseus_count)) theseus_local_rank=$((10#$theseus_local_rank))
((theseus_rank < theseus_count)) || theseus_die "rank $theseus_rank is not below the process count $theseus_count"
export THESEUS_PROCESS_ID=$theseus_rank THESEUS_NUM_PROCESSES=$theseus_count
export RANK=$theseus_rank WORLD_SIZE=$theseus_count LOCAL_RANK=$theseus_local_rank
if [[ -n "$theseus_coordinator" ]]; then
  export JAX_COORDINATOR_ADDRESS=$theseus_coordinator
  export JAX_NUM_PROCESSES=$theseus_count JAX_PROCESS_ID=$theseus_rank
  # torch's rendezvous gets the port after JAX's coordinator: a job may start both (issue 28).
  theseus_port=${theseus_coordinator##*:}
  theseus_is_uint "$theseus_port" && ((10#$theseus_port < 65535)) \
    || theseus_die "the coordinator's port is not a number below 65535: $theseus_coordinator"
  export MASTER_ADDR=${theseus_coordinator%:*} MASTER_PORT=$((10#$theseus_port + 1))
fi
theseus_log "process $theseus_rank of $theseus_count (${theseus_launch})${theseus_coordinator:+, coordinator $theseus_coordinator}"
# As the original's banner: the host and the GPUs the scheduler gave this process (the variables set).
theseus_gpus=""
for theseus_v in CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS SLURM_STEP_GPUS; do
  [[ -z "${!theseus_v+x}" ]] || theseus_gpus+=", $theseus_v=${!theseus_v}"
done
theseus_log "on ${HOSTNAME:-$(uname -n)}${theseus_gpus}"

# ---- resume: THESEUS_ATTEMPT and THESEUS_RESTORE_FROM (resume.sh) ----
theseus_resume
theseus_resume_env

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
theseus_slurm_job_id=null
if [[ "${SLURM_JOB_ID:-}" =~ ^[0-9]+$ ]]; then theseus_slurm_job_id="\"$SLURM_JOB_ID\""; fi
theseus_restore_json=null
if [[ -n "${THESEUS_RESTORE_FROM+x}" ]]; then
  theseus_restore_json=${THESEUS_RESTORE_FROM//[[:cntrl:]]/}
  theseus_restore_json=${theseus_restore_json//\\/\\\\}
  theseus_restore_json=${theseus_restore_json//\"/\\\"}
  theseus_restore_json="\"$theseus_restore_json\""
fi
theseus_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# theseus_write_metadata STATUS [EXIT_CODE]: rewrites the metadata file atomically.
theseus_write_metadata() {
  local status=$1 code=${2:-null} tmp="$theseus_metadata.tmp.$BASHPID"
  {
    printf '{\n%s' "$theseus_identity_json"
    theseus_batch_search_field
    printf '  "rank": %d,\n  "num_processes": %d,\n' "$theseus_rank" "$theseus_count"
    printf '  "hostname": "%s",\n  "pid": %d,\n' "$theseus_hostname" "$$"
    printf '  "slurm_job_id": %s,\n' "$theseus_slurm_job_id"
    printf '  "attempt": %d,\n  "restore_from": %s,\n' "$THESEUS_ATTEMPT" "$theseus_restore_json"
    printf '  "start_time": "%s",\n  "last_heartbeat": "%s",\n' "$theseus_start_time" "$(theseus_now)"
    theseus_stages_json
    printf '  "status": "%s",\n  "exit_code": %s\n}\n' "$status" "$code"
  } > "$tmp"
  mv -f -- "$tmp" "$theseus_metadata"
  # Rank 0 also lists the checkpoints (checkpoints.sh); a failure there is no failure of the job.
  ((theseus_rank != 0)) || theseus_write_checkpoints 2> /dev/null || true
}

# ---- output.log: the job's stdout and stderr, also copied beside metadata.json ----
# As the original's status tree had it: `output.log` (rank 0; `output.rank-<i>.log` for the
# others) in $THESEUS_RUN_DIR, with the job's output and the bootstrap's own lines from the
# job's start on (the original's had its bootstrap's log lines too). theseus_capture_begin points
# the bootstrap's stdout and stderr (so the job's, which inherits them) at two FIFOs read by
# `tee`s that copy to where they went before and append to the log. The tees ignore
# TERM/INT/HUP, so that the last lines of a stopped job are still copied, and are not children
# of the bootstrap (a double fork; same process group): a child that outlives a TERM to the
# whole group made bash's later `wait` for the dead heartbeat hang. theseus_capture_end points
# stdout and stderr back and waits for the copies (at most THESEUS_CAPTURE_WAIT_SECONDS, 10: what
# the job left running may hold the FIFOs open), so that the log is complete before the final
# metadata. Without mkfifo or tee: no copy, one line saying so.
if ((theseus_rank == 0)); then
  theseus_output_log="$THESEUS_RUN_DIR/output.log"
else
  theseus_output_log="$THESEUS_RUN_DIR/output.rank-$theseus_rank.log"
fi
theseus_capture_saved_out="" theseus_capture_saved_err="" theseus_capture_pids=()

# theseus_capture_alive PID: whether the copy PID still runs (a zombie has ended).
theseus_capture_alive() {
  kill -0 "$1" 2> /dev/null || return 1
  local stat=""
  read -r stat < "/proc/$1/stat" 2> /dev/null || return 0
  [[ "${stat##*) }" != Z* ]]
}

theseus_capture_begin() {
  [[ -z "$theseus_capture_saved_out" ]] || return 0
  local fifo="$THESEUS_RUN_DIR/.output.$theseus_rank.$$" stream pid
  theseus_capture_pids=()
  # A host whose own log file is this one (stdout already goes there) has every line in it.
  if [[ /dev/stdout -ef "$theseus_output_log" || /dev/stderr -ef "$theseus_output_log" ]]; then return 0; fi
  if ! command -v tee > /dev/null 2>&1 || ! mkfifo -- "$fifo.out" "$fifo.err" 2> /dev/null; then
    rm -f -- "$fifo.out" "$fifo.err"
    theseus_log "note: cannot copy the job's output into $theseus_output_log (no mkfifo or tee)"
    return 0
  fi
  # Each tee writes its PID before it opens its FIFO; opening the write end below waits for
  # that open, so the PID file is there once it returns.
  ( (trap '' TERM INT HUP; printf '%s' "$BASHPID" > "$fifo.out.pid"; exec tee -a -- "$theseus_output_log" < "$fifo.out" 2> /dev/null) &)
  ( (trap '' TERM INT HUP; printf '%s' "$BASHPID" > "$fifo.err.pid"; exec tee -a -- "$theseus_output_log" < "$fifo.err" >&2 2> /dev/null) &)
  exec {theseus_capture_saved_out}>&1 {theseus_capture_saved_err}>&2
  exec > "$fifo.out" 2> "$fifo.err"
  for stream in out err; do
    pid=$(head -c 20 -- "$fifo.$stream.pid" 2> /dev/null || true)
    if theseus_is_uint "$pid"; then theseus_capture_pids+=("$pid"); fi
  done
  rm -f -- "$fifo.out" "$fifo.err" "$fifo.out.pid" "$fifo.err.pid"
}

theseus_capture_end() {
  [[ -n "$theseus_capture_saved_out" ]] || return 0
  exec 1>&"$theseus_capture_saved_out" 2>&"$theseus_capture_saved_err"
  exec {theseus_capture_saved_out}>&- {theseus_capture_saved_err}>&-
  theseus_capture_saved_out="" theseus_capture_saved_err=""
  local wait=${THESEUS_CAPTURE_WAIT_SECONDS:-10} i=0 pid alive
  theseus_is_uint "$wait" || wait=10
  while ((${#theseus_capture_pids[@]} && i < 10#$wait * 10)); do
    alive=0
    for pid in "${theseus_capture_pids[@]}"; do
      if theseus_capture_alive "$pid"; then alive=1; fi
    done
    ((alive)) || break
    sleep 0.1
    i=$((i + 1))
  done
  for pid in ${theseus_capture_pids[@]+"${theseus_capture_pids[@]}"}; do
    if theseus_capture_alive "$pid"; then kill -KILL "$pid" 2> /dev/null || true; fi
  done
  theseus_capture_pids=()
}

# ---- setup: uv and the project's environment, once per run, then a start barrier ----
# Rank 0 finds (or installs) uv and runs `uv sync` in the shared work dir; the other ranks
# wait for its `done` (or `failed`) marker instead of syncing the same dir at once. Then every
# rank says it is ready and waits for all the others, so that none enters
# `jax.distributed.initialize` while another is still setting up (phase one of a two-phase start).
# With private dirs (each host has its own work dir: theseus_private_dirs=1) the first local
# rank of each host sets up that host's dir and only the host's own ranks wait for it: no file
# is seen across hosts, so `jax.distributed.initialize` is the barrier between them.
theseus_py=("${THESEUS_PYTHON:-python3}")
theseus_uv=""
theseus_last_error=""
theseus_die() { theseus_last_error="$*"; theseus_log "error: $*"; exit 2; }
theseus_setup_dir="$THESEUS_WORK_DIR/.theseus/start"
theseus_setup_timeout=${THESEUS_SETUP_TIMEOUT_SECONDS:-1800}
theseus_is_uint "$theseus_setup_timeout" || theseus_setup_timeout=1800
# uv installed by theseus lives in a private dir (never the system or user site-packages,
# which PEP 668 "externally managed" Pythons refuse): under the cluster's uv_dir, else the run.
if [[ -n "${UV_CACHE_DIR:-}" ]]; then
  theseus_uv_home="$UV_CACHE_DIR/theseus-uv"
else
  theseus_uv_home="$THESEUS_WORK_DIR/.theseus/uv"
fi

# theseus_find_uv: sets theseus_uv to a uv that is there, else returns 1.
theseus_find_uv() {
  local candidate
  if candidate=$(command -v uv 2> /dev/null); then
    theseus_uv=$candidate
    return 0
  fi
  for candidate in "$HOME/.local/bin/uv" "$theseus_uv_home/bin/uv"; do
    if [[ -x "$candidate" ]]; then
      theseus_uv=$candidate
      return 0
    fi
  done
  return 1
}

# theseus_install_uv: a private venv with uv in it, made under a temp name and moved to
# $theseus_uv_home. Never `pip install --user` into the system Python: PEP 668 ("externally
# managed", Debian and Ubuntu images) refuses it. Where python3 cannot make a venv (Debian
# without python3-venv), `pip install --target` into the same private dir, which PEP 668 allows.
theseus_install_uv() {
  local tmp="$theseus_uv_home.tmp.$$.$RANDOM" how
  mkdir -p -- "${theseus_uv_home%/*}"
  if python3 -m venv -- "$tmp" > /dev/null 2>&1 && "$tmp/bin/python" -m pip --version > /dev/null 2>&1; then
    how="a private venv"
    theseus_log "uv is not installed; installing it into $how at $theseus_uv_home (pip install uv)"
    "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check uv >&2 || how=""
  else
    rm -rf -- "$tmp"
    python3 -m pip --version > /dev/null 2>&1 \
      || theseus_die "uv is not installed, and python3 can neither make a venv nor run pip to install it; add uv to the image or machine"
    how="a private dir"
    theseus_log "uv is not installed; installing it into $how at $theseus_uv_home (pip install --target)"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --target "$tmp" uv >&2 || how=""
  fi
  if [[ -z "$how" || ! -x "$tmp/bin/uv" ]]; then
    rm -rf -- "$tmp"
    theseus_die "could not install uv with pip into $theseus_uv_home; add uv to the image or machine"
  fi
  # Another run may have installed it meanwhile: then that one stays and ours goes.
  if [[ ! -e "$theseus_uv_home" ]]; then mv -- "$tmp" "$theseus_uv_home" 2> /dev/null || true; fi
  rm -rf -- "$tmp"
  [[ -x "$theseus_uv_home/bin/uv" ]] || theseus_die "uv is still missing at $theseus_uv_home/bin/uv after installing it"
  theseus_uv="$theseus_uv_home/bin/uv"
}

# The original's `uv sync --frozen || uv sync`: a uv.lock that the frozen sync cannot use (out of
# date with pyproject.toml, a group it lacks, written by another uv) falls back to a re-resolved
# environment, said in one warning line, rather than stopping the job.
theseus_sync() {
  theseus_find_uv || theseus_install_uv
  local groups="${theseus_uv_groups[@]+$(printf ' %q' "${theseus_uv_groups[@]}")}"
  if [[ -f uv.lock ]]; then
    theseus_log "uv sync --frozen$groups"
    if "$theseus_uv" sync --frozen ${theseus_uv_groups[@]+"${theseus_uv_groups[@]}"} >&2; then return 0; fi
    theseus_log "warning: uv sync --frozen failed: uv.lock is stale (or unreadable by this uv); running uv sync$groups," \
      "so this job runs with a re-resolved environment, not the locked one (run uv lock and commit uv.lock to pin it)"
    "$theseus_uv" sync ${theseus_uv_groups[@]+"${theseus_uv_groups[@]}"} >&2 ||
      theseus_die "uv sync failed after uv sync --frozen failed; run uv lock where the code is and submit again"
  else
    theseus_log "uv sync$groups (no uv.lock)"
    "$theseus_uv" sync ${theseus_uv_groups[@]+"${theseus_uv_groups[@]}"} >&2 || theseus_die "uv sync failed"
  fi
}

# theseus_exec_in_code_dir COMMAND...: runs the job's command (exec, in the background child)
# from $THESEUS_CODE_SUBDIR of the work dir when submit ran in that subdirectory of the
# repository (the original shipped only that subtree and ran there); else from the top.
# theseus's own files (`.theseus/job.py`, the runner of job configs) stay at the work dir's top.
theseus_exec_in_code_dir() {
  if [[ -n "${THESEUS_CODE_SUBDIR:-}" ]]; then
    cd -- "$THESEUS_WORK_DIR/$THESEUS_CODE_SUBDIR" 2> /dev/null \
      || theseus_die "THESEUS_CODE_SUBDIR: no directory $THESEUS_CODE_SUBDIR in the shipped code"
    theseus_log "in $THESEUS_CODE_SUBDIR/ of the shipped code (where submit ran)"
    local words=() word
    for word in "$@"; do
      [[ "$word" != .theseus/* ]] || word="$THESEUS_WORK_DIR/$word"
      words+=("$word")
    done
    set -- "${words[@]}"
  fi
  exec "$@"
}

# theseus_write_marker NAME TEXT: a marker file of the start dir, written atomically.
theseus_write_marker() {
  printf '%s\n' "$2" > "$theseus_setup_dir/.$1.$BASHPID" && mv -f -- "$theseus_setup_dir/.$1.$BASHPID" "$theseus_setup_dir/$1"
}

# EXIT trap of rank 0 while it sets up: the others stop at once, told why.
theseus_setup_failed() {
  local rc=$?
  theseus_write_marker "failed.$theseus_setup_token" \
    "${theseus_last_error:-setup exited with $rc} (on ${HOSTNAME:-$(uname -n)})" 2> /dev/null || true
}

theseus_setup_token=""
# Who sets up: rank 0 in the shared work dir, or each host's first local rank in its own.
theseus_setup_leader=0 theseus_leader="rank 0"
if ((theseus_private_dirs)); then theseus_leader="local rank 0 of this host"; fi
if ((theseus_private_dirs ? theseus_local_rank == 0 : theseus_rank == 0)); then theseus_setup_leader=1; fi
# Without a pyproject.toml there is nothing to set up, and so nothing to wait for.
theseus_barrier=0
if ((theseus_count > 1)) && [[ -f pyproject.toml ]]; then theseus_barrier=1; fi
if ((theseus_barrier)); then
  mkdir -p -- "$theseus_setup_dir"
fi
if ((theseus_setup_leader)); then
  if ((theseus_barrier)); then
    # A fresh token per start, so that markers of an earlier start of this run (a restarted
    # job) are not taken for this one's: they go first, then the new token is published.
    theseus_setup_token="$(date +%s)-$$-$RANDOM"
    rm -f -- "$theseus_setup_dir"/epoch "$theseus_setup_dir"/done.* "$theseus_setup_dir"/failed.* \
      "$theseus_setup_dir"/ready.*
    theseus_write_marker epoch "$theseus_setup_token"
    trap theseus_setup_failed EXIT
  fi
  if [[ -f pyproject.toml ]]; then theseus_sync; fi
  if ((theseus_barrier)); then
    trap - EXIT
    theseus_write_marker "done.$theseus_setup_token" ok
  fi
fi
if ((theseus_barrier)); then
  theseus_deadline=$((SECONDS + theseus_setup_timeout))
  theseus_waiting_for=""
  while :; do
    theseus_token=""
    [[ -r "$theseus_setup_dir/epoch" ]] && theseus_token=$(< "$theseus_setup_dir/epoch")
    if [[ -z "$theseus_token" ]]; then
      theseus_waiting_for="$theseus_leader to start its setup"
    elif [[ -f "$theseus_setup_dir/failed.$theseus_token" ]]; then
      theseus_die "$theseus_leader failed to set up the job: $(head -c 2000 -- "$theseus_setup_dir/failed.$theseus_token")"
    elif [[ ! -f "$theseus_setup_dir/done.$theseus_token" ]]; then
      theseus_waiting_for="$theseus_leader to finish its setup (uv sync)"
    else
      if [[ "$theseus_token" != "$theseus_setup_token" ]]; then
        # First time past rank 0's setup for this start: this rank's own part, then ready.
        theseus_setup_token=$theseus_token
        if [[ -f pyproject.toml && -z "$theseus_uv" ]]; then
          theseus_find_uv || theseus_install_uv
        fi
      fi
      # Ranks of other hosts write their markers into their own dirs: nothing to wait for here.
      ((theseus_private_dirs)) && break
      [[ -f "$theseus_setup_dir/ready.$theseus_token.$theseus_rank" ]] \
        || theseus_write_marker "ready.$theseus_token.$theseus_rank" ok
      theseus_missing=()
      for ((theseus_r = 0; theseus_r < theseus_count; theseus_r++)); do
        [[ -f "$theseus_setup_dir/ready.$theseus_token.$theseus_r" ]] || theseus_missing+=("$theseus_r")
      done
      ((${#theseus_missing[@]} == 0)) && break
      theseus_waiting_for="rank(s) ${theseus_missing[*]} to finish their setup"
    fi
    if ((SECONDS >= theseus_deadline)); then
      theseus_die "waited ${theseus_setup_timeout}s for $theseus_waiting_for (THESEUS_SETUP_TIMEOUT_SECONDS); see that rank's log"
    fi
    sleep 0.2
  done
  if ((theseus_private_dirs)); then
    theseus_log "this host's setup is done (its own work dir; other hosts set up theirs)"
  else
    theseus_log "every rank finished its setup"
  fi
fi
if [[ -f pyproject.toml ]]; then
  [[ -n "$theseus_uv" ]] || theseus_find_uv || theseus_install_uv
  theseus_py=("$theseus_uv" run --no-sync python)
fi

# ---- the job: its stages, in order ----
# Stage 1 is the entrypoint; theseus_stage<i>_* (rendered above) hold the stages of `-s FILE`.
# They run one after the other in this work dir, each leading a process group of its own, each
# with THESEUS_STAGE / THESEUS_NUM_STAGES and its own THESEUS_CONFIG; stage i > 1 also has its
# own THESEUS_JOB_NAME (`<name>_stage<i>`, as the original named its stages) and so its own
# THESEUS_CHECKPOINT_DIR and resume. The first stage that fails ends the job with its exit code.
# With more than one stage, each stage's output is also copied to stage-<i>.log beside the
# metadata, and a stage that completed in an earlier attempt of this run (a restart) is not
# run again: its completion is recorded in $THESEUS_RUN_DIR/.stages/.
theseus_stage=0
theseus_stage_status=() theseus_stage_code=() theseus_stage_start=() theseus_stage_end=()
for ((theseus_i = 1; theseus_i <= theseus_num_stages; theseus_i++)); do
  theseus_stage_status[theseus_i]=pending theseus_stage_code[theseus_i]=null
  theseus_stage_start[theseus_i]=null theseus_stage_end[theseus_i]=null
done
theseus_rank_suffix=""
((theseus_rank == 0)) || theseus_rank_suffix=".rank-$theseus_rank"
theseus_stages_dir="$THESEUS_RUN_DIR/.stages"
theseus_job_name=$THESEUS_JOB_NAME
theseus_checkpoint_base=$THESEUS_CHECKPOINT_DIR
theseus_tee_out="" theseus_tee_err="" theseus_out_fd="" theseus_err_fd=""

# theseus_stages_json: the `stage` and `stages` fields of metadata.json (none for one stage).
# Each stage on one line without blanks after the colons: readers that grep the file for the
# job's own `"status": "completed"` (the Slurm follow) must not take a stage's for it.
theseus_stages_json() {
  ((theseus_num_stages > 1)) || return 0
  local i sep=""
  printf '  "stage": %d,\n  "stages": [' "$theseus_stage"
  for ((i = 1; i <= theseus_num_stages; i++)); do
    printf '%s\n    {"name":%s,"status":"%s","exit_code":%s,"start":%s,"end":%s}' "$sep" \
      "${theseus_stage_names_json[i]}" "${theseus_stage_status[i]}" "${theseus_stage_code[i]}" \
      "${theseus_stage_start[i]}" "${theseus_stage_end[i]}"
    sep=,
  done
  printf '\n  ],\n'
}

# theseus_stage_label I: stage I as the log shows it.
theseus_stage_label() {
  local name=${theseus_stage_names_json[$1]}
  printf 'stage %d of %d (%s)' "$1" "$theseus_num_stages" "${name:1:${#name}-2}"
}

# theseus_stage_select I: theseus_cmd and the environment of stage I.
theseus_stage_select() {
  local i=$1
  if ((i > 1)); then
    eval "theseus_python_entry=\$theseus_stage${i}_python_entry theseus_jax=\$theseus_stage${i}_jax"
    eval "theseus_args=(\${theseus_stage${i}_args[@]+\"\${theseus_stage${i}_args[@]}\"})"
    eval "theseus_batch_search=\${theseus_stage${i}_batch_search:-0}"
    export THESEUS_CONFIG="$THESEUS_WORK_DIR/.theseus/stage-$i/config.json"
    export THESEUS_JOB_NAME="${theseus_job_name}_stage$i"
    export THESEUS_CHECKPOINT_DIR="${theseus_checkpoint_base}_stage$i"
    # `submit --restore` is the first stage's, as in the original; the others resume their own.
    theseus_restore="" theseus_resume_base="resume-base.stage-$i"
    theseus_resume
  fi
  export THESEUS_STAGE=$i THESEUS_NUM_STAGES=$theseus_num_stages
  if ((theseus_python_entry)); then
    theseus_cmd=("${theseus_py[@]}" "$THESEUS_WORK_DIR/.theseus/launcher.py")
    case $theseus_jax in jax) theseus_cmd+=(--jax) ;; auto) theseus_cmd+=(--jax-auto) ;; esac
    theseus_cmd+=(-- ${theseus_args[@]+"${theseus_args[@]}"})
  else
    theseus_cmd=("${theseus_args[@]}")
  fi
  # Part `batch`: runs the command through the batch-size search when the stage asks for it.
  if declare -F theseus_wrap_batch_search > /dev/null; then theseus_wrap_batch_search; fi
}

# theseus_stage_log_open I: with more than one stage, copies what follows (the stage's output
# and the bootstrap's own lines) to stage-<I>.log beside the metadata. The copies ignore
# TERM/INT/HUP: a scheduler that signals every process of the job must not cut them, or the
# bootstrap's last lines would hit a closed pipe; they end when the last writer closes.
theseus_stage_log_open() {
  ((theseus_num_stages > 1)) || return 0
  local log="$THESEUS_RUN_DIR/stage-$1$theseus_rank_suffix.log"
  exec {theseus_out_fd}>&1 {theseus_err_fd}>&2
  exec > >(trap '' TERM INT HUP; exec tee -a -- "$log")
  theseus_tee_out=$!
  exec 2> >(trap '' TERM INT HUP; exec tee -a -- "$log" >&2)
  theseus_tee_err=$!
}

# theseus_stage_log_close: back to the bootstrap's own output, once the copies are written
# (at most 5 s: a process that left the job's group may still hold them open).
# Marked closed first: a signal's handler that calls it again while it waits returns at once
# (restoring from the saved fds twice would fail, and a failed `exec` ends the shell).
theseus_stage_log_close() {
  [[ -n "$theseus_tee_out" ]] || return 0
  local out=$theseus_tee_out err=$theseus_tee_err i=0
  theseus_tee_out="" theseus_tee_err=""
  exec 1>&"$theseus_out_fd" 2>&"$theseus_err_fd" {theseus_out_fd}>&- {theseus_err_fd}>&-
  while ((i < 50)) && { kill -0 "$out" 2> /dev/null || kill -0 "$err" 2> /dev/null; }; do
    sleep 0.1
    i=$((i + 1))
  done
}

# theseus_stage_settle STATUS CODE: the current stage's end, if it is running.
theseus_stage_settle() {
  ((theseus_stage > 0)) || return 0
  [[ "${theseus_stage_status[theseus_stage]}" == running ]] || return 0
  theseus_stage_status[theseus_stage]=$1 theseus_stage_code[theseus_stage]=$2
  theseus_stage_end[theseus_stage]="\"$(theseus_now)\""
}

# theseus_stage_done_file I [RANK]: where RANK (default this one) records that stage I completed.
theseus_stage_done_file() {
  local rank=${2:-$theseus_rank}
  printf '%s/done-%d' "$theseus_stages_dir" "$1"
  ((rank == 0)) || printf '.rank-%d' "$rank"
}

# theseus_stage_skip I: whether stage I completed in an earlier attempt of this run on every
# rank (then it is recorded as such and not run again). Every rank decides alike from the same
# files, so no rank skips a stage another runs (their collectives would wait forever); where
# ranks cannot see each other's files (a run dir per host), none skips.
theseus_stage_skip() {
  ((theseus_num_stages > 1)) || return 1
  local file start end r missing=()
  file=$(theseus_stage_done_file "$1")
  [[ -f "$file" ]] || return 1
  for ((r = 0; r < theseus_count; r++)); do
    [[ -f "$(theseus_stage_done_file "$1" "$r")" ]] || missing+=("$r")
  done
  if ((${#missing[@]})); then
    theseus_log "$(theseus_stage_label "$1") completed on this rank in an earlier attempt, but not on rank(s) ${missing[*]}; running it again"
    return 1
  fi
  read -r start end < "$file" || true
  [[ "$start" =~ ^[0-9TZ:-]+$ ]] || start=""
  [[ "$end" =~ ^[0-9TZ:-]+$ ]] || end=""
  theseus_stage_status[$1]=completed theseus_stage_code[$1]=0
  theseus_stage_start[$1]=${start:+\"$start\"} theseus_stage_end[$1]=${end:+\"$end\"}
  theseus_stage_start[$1]=${theseus_stage_start[$1]:-null} theseus_stage_end[$1]=${theseus_stage_end[$1]:-null}
  theseus_log "$(theseus_stage_label "$1") completed in an earlier attempt of this run; not running it again"
}

# theseus_stage_record_done I: records that stage I completed (best effort).
theseus_stage_record_done() {
  ((theseus_num_stages > 1)) || return 0
  local file start=${theseus_stage_start[$1]} end=${theseus_stage_end[$1]}
  file=$(theseus_stage_done_file "$1")
  { mkdir -p -- "$theseus_stages_dir" && printf '%s %s\n' "${start//\"/}" "${end//\"/}" > "$file.tmp.$$" \
    && mv -f -- "$file.tmp.$$" "$file"; } 2> /dev/null \
    || theseus_log "note: cannot record in $theseus_stages_dir that stage $1 completed; a restart runs it again"
}

# ---- batch-size search (issue 28, part batch) ----
# theseus_wrap_batch_search: with theseus_batch_search=1 (a job config whose
# training.per_device_batch_size is -1), theseus_cmd runs through the search driver, which probes
# it at candidate sizes and then runs it with the largest that fits (batch_search.py). A
# THESEUS_DISPATCH_BATCH_SIZE in the environment names the size: then nothing is searched.
theseus_wrap_batch_search() {
  ((theseus_batch_search)) || return 0
  if [[ -n "${THESEUS_DISPATCH_BATCH_SIZE:-}" ]]; then
    theseus_log "batch search: THESEUS_DISPATCH_BATCH_SIZE=$THESEUS_DISPATCH_BATCH_SIZE is set; not searching"
    return 0
  fi
  theseus_cmd=("${theseus_py[@]}" "$THESEUS_WORK_DIR/.theseus/batch_search.py" -- "${theseus_cmd[@]}")
}

# theseus_batch_search_field: the `"batch_search": {...},` line of metadata.json, once the
# current stage's search wrote its progress (atomically, as one JSON object) to the run dir.
theseus_batch_search_field() {
  local file="$THESEUS_RUN_DIR/batch-search.json" doc=""
  # Stage I > 1 searches on its own (batch_search.py names the file after THESEUS_STAGE).
  if [[ "${THESEUS_STAGE:-1}" =~ ^[0-9]+$ ]] && ((THESEUS_STAGE > 1)); then
    file="$THESEUS_RUN_DIR/batch-search.stage-$THESEUS_STAGE.json"
  fi
  [[ -f "$file" ]] || return 0
  doc=$(< "$file") 2> /dev/null || return 0
  [[ "$doc" == "{"*"}" ]] || return 0
  printf '  "batch_search": %s,\n' "$doc"
}

theseus_child=""
theseus_heartbeat=""
theseus_finished=0

theseus_stop_heartbeat() {
  if [[ -n "$theseus_heartbeat" ]]; then
    kill -TERM "$theseus_heartbeat" 2> /dev/null || true
    wait "$theseus_heartbeat" 2> /dev/null || true
    rm -f -- "$theseus_metadata.tmp.$theseus_heartbeat" "$THESEUS_RUN_DIR/checkpoints.json.tmp.$theseus_heartbeat"
    theseus_heartbeat=""
  fi
}

# theseus_finish STATUS CODE: final metadata, then exit with CODE.
theseus_finish() {
  theseus_finished=1
  theseus_stop_heartbeat
  # What the job left running in the background ends with it, as it would in a cgroup.
  theseus_signal_job TERM group
  theseus_stage_settle "$1" "$2"
  theseus_stage_log_close
  if declare -F theseus_capture_end > /dev/null; then theseus_capture_end; fi
  theseus_write_metadata "$1" "$2" || theseus_log "cannot write $theseus_metadata"
  exit "$2"
}

# theseus_signal_job SIGNAL [group]: sends SIGNAL to the job's process group (the job leads
# it, see below), which also reaches processes the job left in the background that no longer
# descend from it. While the job may be unwaited, and only then, a job that left the group
# (setsid) is signalled by its PID; with `group`, after `wait`, its PID may belong to another.
theseus_signal_job() {
  [[ -n "$theseus_child" ]] || return 0
  kill "-$1" -- "-$theseus_child" 2> /dev/null && return 0
  [[ "${2:-}" == group ]] || kill "-$1" "$theseus_child" 2> /dev/null || true
}

# theseus_job_alive: whether any process of the job's group (or the job) is still alive.
theseus_job_alive() {
  [[ -n "$theseus_child" ]] || return 1
  kill -0 -- "-$theseus_child" 2> /dev/null || kill -0 "$theseus_child" 2> /dev/null
}

# theseus_on_signal NAME CODE: forwards TERM to the job's process group, waits briefly (then
# KILL), records preemption.
theseus_on_signal() {
  trap '' TERM INT HUP
  theseus_log "received SIG$1; stopping the job"
  # The job gets TERM at once; what follows may take a moment to learn.
  [[ -z "$theseus_child" ]] || theseus_signal_job TERM
  # A preemption the scheduler ends itself after a grace (Slurm's GraceTime): the host type's
  # script THESEUS_PREEMPT_HOLD prints the seconds left until its KILL (asked for at most 5 s,
  # which count against them). The job gets all of them (unless THESEUS_TERM_GRACE_SECONDS says
  # otherwise), and the bootstrap then waits for the scheduler to end the attempt: a job that
  # ends within its grace is not requeued (Slurm records it FAILED, or COMPLETED for exit 0).
  local hold="" asked=$SECONDS
  if [[ -n "${THESEUS_PREEMPT_HOLD:-}" && -f "$THESEUS_PREEMPT_HOLD" ]]; then
    local bound=()
    if command -v timeout > /dev/null 2>&1; then bound=(timeout 5); fi
    local said="$THESEUS_RUN_DIR/.preempt-hold.$theseus_rank"
    hold=$(${bound[@]+"${bound[@]}"} bash "$THESEUS_PREEMPT_HOLD" 2> "$said" < /dev/null || true)
    [[ ! -s "$said" ]] || theseus_log "preemption check: $(head -c 300 -- "$said" | tr -d '[:cntrl:]')"
    rm -f -- "$said"
  fi
  theseus_is_uint "$hold" && ((10#$hold > 0)) || hold=""
  if [[ -n "$hold" ]]; then hold=$((10#$hold - (SECONDS - asked))); ((hold > 1)) || hold=2; fi
  if [[ -n "$theseus_child" ]]; then
    # THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS: the original's name for it, read when it is unset.
    local grace=${THESEUS_TERM_GRACE_SECONDS:-${THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS:-10}} i=0
    if theseus_is_uint "$grace"; then grace=$((10#$grace)); else grace=10; fi
    # The scheduler KILLs the bootstrap THESEUS_KILL_DEADLINE_SECONDS after its TERM (Slurm's
    # KillWait). The group is KILLed a second before that, while the bootstrap still can: a
    # process that left the step's process tree would otherwise outlive the job.
    local deadline=${THESEUS_KILL_DEADLINE_SECONDS:-}
    if [[ -n "$hold" ]]; then
      deadline=$hold
      [[ -n "${THESEUS_TERM_GRACE_SECONDS:-${THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS:-}}" ]] || grace=$hold
    elif theseus_is_uint "$deadline" && ((SECONDS > asked)); then
      # The seconds spent asking came off the scheduler's deadline too.
      deadline=$((10#$deadline - (SECONDS - asked)))
      ((deadline > 1)) || deadline=2
    fi
    if theseus_is_uint "$deadline" && ((10#$deadline > 1 && grace >= 10#$deadline)); then
      grace=$((10#$deadline - 1))
    fi
    while theseus_job_alive && ((i < grace * 10)); do
      sleep 0.1
      i=$((i + 1))
    done
    if theseus_job_alive; then
      theseus_log "the job did not stop within ${grace}s; killing it"
      theseus_signal_job KILL
    fi
    wait "$theseus_child" 2> /dev/null || true
  fi
  if [[ -n "$hold" ]]; then
    theseus_finished=1
    theseus_stop_heartbeat
    theseus_signal_job TERM group
    theseus_stage_settle preempted "$2"
    theseus_stage_log_close
    if declare -F theseus_capture_end > /dev/null; then theseus_capture_end; fi
    theseus_write_metadata preempted "$2" || theseus_log "cannot write $theseus_metadata"
    theseus_log "preempted with a grace: the job stopped; waiting for the scheduler to end this attempt (up to ${hold}s)"
    trap "exit $2" TERM INT HUP
    local t=0
    while ((t < 10#$hold + 30)); do
      sleep 1
      t=$((t + 1))
    done
    exit "$2"
  fi
  theseus_finish preempted "$2"
}

theseus_on_exit() {
  local rc=$?
  if ((!theseus_finished)); then
    theseus_finished=1
    theseus_stop_heartbeat
    theseus_signal_job TERM
    theseus_stage_settle failed "$rc"
    theseus_stage_log_close 2> /dev/null || true
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

if declare -F theseus_capture_begin > /dev/null; then theseus_capture_begin; fi
for ((theseus_i = 1; theseus_i <= theseus_num_stages; theseus_i++)); do
  theseus_stage=$theseus_i
  theseus_stage_skip "$theseus_i" && continue
  theseus_stage_select "$theseus_i"
  theseus_stage_status[theseus_i]=running theseus_stage_start[theseus_i]="\"$(theseus_now)\""
  # The heartbeat is a copy of this shell: a new one per stage writes the stage's status.
  theseus_stop_heartbeat
  theseus_write_metadata running
  theseus_heartbeat_loop > /dev/null &
  theseus_heartbeat=$!
  theseus_stage_log_open "$theseus_i"
  ((theseus_num_stages == 1)) || theseus_log "$(theseus_stage_label "$theseus_i")"
  theseus_log "running:$(printf ' %q' "${theseus_cmd[@]}")"
  # The job leads a process group of its own (job control on for this one `&`), so that a
  # signal reaches everything it started even after a parent in between has exited: Slurm's
  # proctrack/linuxproc follows parent links only, and loses such processes. Without job control
  # bash gave a background job /dev/null as stdin; it still does.
  set -m
  theseus_exec_in_code_dir "${theseus_cmd[@]}" < /dev/null &
  theseus_child=$!
  set +m
  theseus_rc=0
  wait "$theseus_child" || theseus_rc=$?
  if ((theseus_rc != 0)); then
    if ((theseus_num_stages == 1)); then
      theseus_log "the job exited with $theseus_rc"
    else
      theseus_log "the job exited with $theseus_rc in $(theseus_stage_label "$theseus_i"); the stages after it do not run"
    fi
    theseus_finish failed "$theseus_rc"
  fi
  ((theseus_i == theseus_num_stages)) && break
  theseus_stage_settle completed 0
  theseus_stage_record_done "$theseus_i"
  # What the stage left running in the background ends with it, before the next one starts.
  theseus_signal_job TERM group
  theseus_child=""
  theseus_stage_log_close
done
theseus_finish completed 0
