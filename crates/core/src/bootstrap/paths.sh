# The run's paths as the job sees them (theseus, issue 28): the rendered ones, unless
# THESEUS_DISPATCH_{ROOT,WORK,LOG,DATA,CHECKPOINTS,RESULTS,STATUS}_OVERRIDE say otherwise (in the
# job's environment, or from `theseus bootstrap`'s script flags --root/--work/--log). It reads
# theseus_paths_* (generated above it) and the rendered THESEUS_DATA_DIR, THESEUS_CHECKPOINTS_DIR
# and THESEUS_RESULTS_DIR; it exports THESEUS_ROOT, THESEUS_WORK_DIR, THESEUS_RUN_DIR,
# THESEUS_STATUS_DIR, THESEUS_LOG_DIR, THESEUS_DATA_DIR, THESEUS_CHECKPOINTS_DIR,
# THESEUS_RESULTS_DIR, THESEUS_CHECKPOINT_DIR and THESEUS_CONFIG.
#
# - ROOT: the cluster root. Every rendered dir under the old root moves under the new one
#   (work, status, log, data, checkpoints, results), as the original's defaults followed it.
# - WORK: the work root; the run's code dir is <WORK>/<the same relative dir>, and a log dir
#   under the old work root moves with it (the default log dir is <work>/logs).
# - LOG, DATA, CHECKPOINTS, RESULTS: those dirs (`submit --restore` under the old root or
#   checkpoints dir moves with them). STATUS: the status root; the run's status dir
#   is <STATUS>/<project>/<group>/<name>/<run>.
# An empty value counts as unset (as the original's); a relative one is an error.

# theseus_path_override NAME: sets theseus_o to THESEUS_DISPATCH_<NAME>_OVERRIDE without
# trailing slashes, or to nothing when it is unset or blank.
theseus_path_override() {
  local name="THESEUS_DISPATCH_${1}_OVERRIDE" v
  v=${!name-}
  theseus_o=""
  [[ -n "${v//[[:space:]]/}" ]] || return 0
  [[ "$v" == /* ]] || theseus_die "$name is not an absolute path: $v"
  while [[ "$v" == */ && "$v" != / ]]; do v=${v%/}; done
  theseus_o=$v
  theseus_paths_overridden+=" $1"
}

# theseus_reroot VAR OLD NEW: VAR (a variable name) moves under NEW when its value is OLD or
# under OLD.
theseus_reroot() {
  local value=${!1} old=$2 new=$3
  [[ "$old" != / ]] || return 0
  if [[ "$value" == "$old" ]]; then
    printf -v "$1" '%s' "$new"
  elif [[ "$value" == "$old"/* ]]; then
    printf -v "$1" '%s%s' "$new" "${value#"$old"}"
  fi
}

# theseus_resolve_paths: exports the paths (see above).
theseus_resolve_paths() {
  local n
  # A `~/` path (a TPU VM's template: each worker's home) is this machine's home.
  for n in root work work_rendered status run_rendered log; do
    n=theseus_paths_$n
    if [[ "${!n-}" == "~/"* ]]; then printf -v "$n" '%s/%s' "$HOME" "${!n#"~/"}"; fi
  done
  local root=$theseus_paths_root work=$theseus_paths_work status=$theseus_paths_status log=$theseus_paths_log
  local data=$THESEUS_DATA_DIR checkpoints=$THESEUS_CHECKPOINTS_DIR results=$THESEUS_RESULTS_DIR
  local theseus_o v
  theseus_paths_overridden=""
  # `submit --restore` (theseus_restore, absolute) moves with the dir it is under.
  local restore=${theseus_restore-} old_checkpoints
  theseus_path_override ROOT
  if [[ -n "$theseus_o" ]]; then
    for v in work status log data checkpoints results restore; do theseus_reroot "$v" "$root" "$theseus_o"; done
    root=$theseus_o
  elif ((theseus_paths_require_root)); then
    theseus_die "the root dir was not given when this script was made: pass --root PATH (or set THESEUS_DISPATCH_ROOT_OVERRIDE)"
  fi
  theseus_path_override WORK
  if [[ -n "$theseus_o" ]]; then
    [[ -z "$log" ]] || theseus_reroot log "$work" "$theseus_o"
    work=$theseus_o
  fi
  theseus_path_override LOG
  [[ -z "$theseus_o" ]] || log=$theseus_o
  theseus_path_override DATA
  [[ -z "$theseus_o" ]] || data=$theseus_o
  theseus_path_override CHECKPOINTS
  if [[ -n "$theseus_o" ]]; then
    old_checkpoints=$checkpoints
    checkpoints=$theseus_o
    [[ -z "$restore" ]] || theseus_reroot restore "$old_checkpoints" "$checkpoints"
  fi
  theseus_path_override RESULTS
  [[ -z "$theseus_o" ]] || results=$theseus_o
  theseus_path_override STATUS
  [[ -z "$theseus_o" ]] || status=$theseus_o
  export THESEUS_ROOT=$root THESEUS_STATUS_DIR=$status THESEUS_DATA_DIR=$data
  export THESEUS_CHECKPOINTS_DIR=$checkpoints THESEUS_RESULTS_DIR=$results
  # Dirs no override moved are exactly as rendered (a backend may have rewritten them).
  if [[ "$work" == "$theseus_paths_work" ]]; then
    export THESEUS_WORK_DIR=$theseus_paths_work_rendered
  else
    export THESEUS_WORK_DIR=$work${theseus_paths_work_rel:+/$theseus_paths_work_rel}
  fi
  if [[ "$status" == "$theseus_paths_status" ]]; then
    export THESEUS_RUN_DIR=$theseus_paths_run_rendered
  else
    export THESEUS_RUN_DIR=$status${theseus_paths_run_rel:+/$theseus_paths_run_rel}
  fi
  export THESEUS_CHECKPOINT_DIR=${checkpoints%/}/$theseus_paths_job_rel
  export THESEUS_CONFIG=${THESEUS_WORK_DIR%/}/.theseus/config.json
  if [[ -n "$log" ]]; then export THESEUS_LOG_DIR=$log; else unset THESEUS_LOG_DIR; fi
  if [[ -n "${theseus_restore+x}" ]]; then theseus_restore=$restore; fi
}

# theseus_paths_env: after the paths moved, `theseus shell` sees them too: .theseus/paths.sh,
# which env.sh sources, holds them (removed when nothing moved); best effort.
theseus_paths_env() {
  local file="$THESEUS_WORK_DIR/.theseus/paths.sh" v
  if [[ -z "$theseus_paths_overridden" ]]; then
    rm -f -- "$file" 2> /dev/null || true
    return 0
  fi
  {
    printf '# Generated by the bootstrap: the paths after%s overrides. Do not edit.\n' "$theseus_paths_overridden"
    for v in THESEUS_ROOT THESEUS_WORK_DIR THESEUS_RUN_DIR THESEUS_STATUS_DIR THESEUS_LOG_DIR THESEUS_DATA_DIR \
      THESEUS_CHECKPOINTS_DIR THESEUS_RESULTS_DIR THESEUS_CHECKPOINT_DIR THESEUS_CONFIG; do
      [[ -z "${!v+x}" ]] || printf 'export %s=%s\n' "$v" "'${!v//\'/\'\\\'\'}'"
    done
  } > "$file.tmp.$$" 2> /dev/null && mv -f -- "$file.tmp.$$" "$file" 2> /dev/null || {
    rm -f -- "$file.tmp.$$" 2> /dev/null
    theseus_log "note: cannot write $file"
  }
}
