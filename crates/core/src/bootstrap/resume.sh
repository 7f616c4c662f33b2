# The resume step of bootstrap.sh (theseus), static: functions only, called by the body after
# the rank wiring. It reads THESEUS_CHECKPOINT_DIR, THESEUS_RUN_DIR, theseus_restore (the
# absolute `submit --restore` path, or empty) and theseus_fresh (1 for `submit --fresh`), and
# exports THESEUS_ATTEMPT and THESEUS_RESTORE_FROM with THESEUS_RESTORE_SOURCE (`own`: the latest
# marker this run wrote; `restore`: `submit --restore`; `latest`: the marker an earlier run left),
# or unsets both.

# theseus_attempt: 1 + the restarts the backend counted: THESEUS_RESTART_COUNT (Volcano: the
# pod annotation volcano.sh/job-retry-count through the downward API), else SLURM_RESTART_COUNT
# (a requeued Slurm job), else 0. Empty or non-numeric values count as 0.
theseus_attempt() {
  local count=0 value
  for value in "${THESEUS_RESTART_COUNT:-}" "${SLURM_RESTART_COUNT:-}"; do
    if [[ "$value" =~ ^[0-9]{1,9}$ ]]; then
      count=$((10#$value))
      break
    fi
  done
  export THESEUS_ATTEMPT=$((count + 1))
}

# theseus_marker_stamp FILE: what identifies one write of the marker (inode, size, mtime and
# its first line): a rename or a rewrite in place changes it. `none` when there is no marker.
theseus_marker_stamp() {
  if [[ ! -f "$1" ]]; then
    printf 'none'
    return 0
  fi
  local stat
  stat=$(stat -c '%i %s %y' -- "$1" 2> /dev/null) || stat=$(cksum < "$1" 2> /dev/null) || stat=unknown
  printf '%s %s' "$stat" "$(head -c 4096 -- "$1" 2> /dev/null | head -n 1 | cksum)"
}

# theseus_marker_target: sets theseus_target to the checkpoint the `latest` marker names, or
# returns 1 with theseus_why saying why it names none that can be used. The first line names a
# dir relative to THESEUS_CHECKPOINT_DIR (absolute also accepted); surrounding blanks and a CR
# are dropped. Refused: an empty line, control characters, a `..` component (a marker must not
# lead out of the checkpoint dir), a path that is not a directory.
theseus_marker_target() {
  local marker="$THESEUS_CHECKPOINT_DIR/latest" line
  theseus_target=""
  if [[ ! -e "$marker" ]]; then
    theseus_why="no latest marker in $THESEUS_CHECKPOINT_DIR"
    return 1
  fi
  if [[ ! -f "$marker" || ! -r "$marker" ]]; then
    theseus_why="the latest marker $marker is not a readable file; ignoring it"
    return 1
  fi
  line=$(head -c 4096 -- "$marker" 2> /dev/null | head -n 1 | tr -d '\000') || line=""
  line=${line%$'\r'}
  line="${line#"${line%%[![:space:]]*}"}"
  line="${line%"${line##*[![:space:]]}"}"
  if [[ -z "$line" ]]; then
    theseus_why="the latest marker $marker is empty; ignoring it"
    return 1
  fi
  if [[ "$line" == *[[:cntrl:]]* ]]; then
    theseus_why="the latest marker $marker holds control characters; ignoring it"
    return 1
  fi
  if [[ "/$line/" == */../* ]]; then
    theseus_why="the latest marker $marker names $line, which leads out of the checkpoint dir (..); ignoring it"
    return 1
  fi
  if [[ "$line" != /* ]]; then line="$THESEUS_CHECKPOINT_DIR/$line"; fi
  while [[ "$line" == */ && "$line" != / ]]; do line=${line%/}; done
  if [[ ! -d "$line" ]]; then
    theseus_why="the latest marker $marker names $line, which is not a directory; ignoring it"
    return 1
  fi
  theseus_target=$line
}

# theseus_resume: exports THESEUS_ATTEMPT and THESEUS_RESTORE_FROM, in this order of precedence:
# (1) the latest marker, when it was written after this run first started (a restarted attempt
# resumes its own work); (2) `submit --restore`; (3) unless `submit --fresh`, the latest marker
# an earlier run of this name left; (4) none. Logs one line saying which and why. A stage after
# the first (body.sh) calls it again with its own checkpoint dir and theseus_resume_base naming
# its own record of the marker.
theseus_resume() {
  theseus_attempt
  local marker="$THESEUS_CHECKPOINT_DIR/latest" base_file="$THESEUS_RUN_DIR/${theseus_resume_base:-resume-base}" base now tmp
  [[ -d "$THESEUS_CHECKPOINT_DIR" ]] || mkdir -p -- "$THESEUS_CHECKPOINT_DIR" 2> /dev/null \
    || theseus_log "note: cannot create the checkpoint dir $THESEUS_CHECKPOINT_DIR"
  now=$(theseus_marker_stamp "$marker")
  # The marker as this run first found it, recorded once for every rank and attempt: the first
  # process to get here links it into place (a link never replaces), the others read it.
  if [[ ! -f "$base_file" ]]; then
    tmp="$base_file.tmp.$$.$RANDOM"
    if printf '%s\n' "$now" > "$tmp" 2> /dev/null; then
      ln -- "$tmp" "$base_file" 2> /dev/null || [[ -f "$base_file" ]] || mv -f -- "$tmp" "$base_file" 2> /dev/null || true
      rm -f -- "$tmp"
    fi
  fi
  if ! base=$(head -n 1 -- "$base_file" 2> /dev/null); then
    base=$now
    theseus_log "note: cannot record the latest marker in $base_file; a restart will take it for an earlier run's"
  fi
  local theseus_target theseus_why="" own=0
  if [[ "$now" != none && "$now" != "$base" ]]; then own=1; fi
  unset THESEUS_RESTORE_FROM THESEUS_RESTORE_SOURCE
  if ((own)) && theseus_marker_target; then
    export THESEUS_RESTORE_FROM=$theseus_target THESEUS_RESTORE_SOURCE=own
    theseus_log "attempt $THESEUS_ATTEMPT: resuming from $theseus_target (latest, written by this run)"
    return 0
  fi
  local own_why=""
  if ((own)); then own_why=" (${theseus_why})"; fi
  if [[ -n "$theseus_restore" ]]; then
    if [[ ! -d "$theseus_restore" ]]; then
      theseus_die "submit --restore: $theseus_restore is not a directory on $(uname -n)${own_why}"
    fi
    export THESEUS_RESTORE_FROM=$theseus_restore THESEUS_RESTORE_SOURCE=restore
    theseus_log "attempt $THESEUS_ATTEMPT: resuming from $theseus_restore (submit --restore)${own_why}"
    return 0
  fi
  if ((theseus_fresh)); then
    theseus_log "attempt $THESEUS_ATTEMPT: starting fresh (submit --fresh: the latest marker of an earlier run is ignored)${own_why}"
    return 0
  fi
  if ((!own)) && theseus_marker_target; then
    export THESEUS_RESTORE_FROM=$theseus_target THESEUS_RESTORE_SOURCE=latest
    theseus_log "attempt $THESEUS_ATTEMPT: resuming from $theseus_target (latest, left by an earlier run of $THESEUS_JOB_NAME)"
    return 0
  fi
  theseus_log "attempt $THESEUS_ATTEMPT: starting fresh ($theseus_why)"
}

# theseus_sq TEXT: TEXT quoted for POSIX sh.
theseus_sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# theseus_resume_env: appends this start's THESEUS_ATTEMPT and THESEUS_RESTORE_FROM to env.sh
# (for `theseus shell`), replacing what an earlier start appended; best effort.
theseus_resume_env() {
  local file="$THESEUS_WORK_DIR/.theseus/env.sh" tmp mark='# ---- set by the bootstrap at start ----'
  [[ -f "$file" ]] || return 0
  tmp="$file.tmp.$$"
  {
    sed "/^$mark\$/,\$d" -- "$file"
    printf '%s\n' "$mark"
    printf 'export THESEUS_ATTEMPT=%s\n' "$THESEUS_ATTEMPT"
    if [[ -n "${THESEUS_RESTORE_FROM+x}" ]]; then
      printf 'export THESEUS_RESTORE_FROM=%s THESEUS_RESTORE_SOURCE=%s\n' "$(theseus_sq "$THESEUS_RESTORE_FROM")" \
        "${THESEUS_RESTORE_SOURCE:-}"
    else
      printf 'unset THESEUS_RESTORE_FROM THESEUS_RESTORE_SOURCE\n'
    fi
  } > "$tmp" 2> /dev/null && mv -f -- "$tmp" "$file" 2> /dev/null || {
    rm -f -- "$tmp"
    theseus_log "note: cannot update $file"
  }
}
