# The static part of a standalone script (theseus bootstrap). It reads the values above it
# (theseus_paths_*, the rendered THESEUS_* paths, theseus_run_id_token) and the functions
# theseus_payload (the code, a base64 gzipped tar) and theseus_file_<i> (the bootstrap files).

theseus_usage() {
  cat << 'THESEUS_USAGE'
Usage: bash SCRIPT [--root PATH] [--work PATH] [--log PATH] [--]

Runs one theseus job on this machine: extracts its code into <work>/<project>/<group>/<name>
and runs it there; its status (metadata.json) goes under <root>/status.

Options:
  --root PATH  The root dir (data, checkpoints, results, status); required when the script
               was made without --root.
  --work PATH  The work root (default <root>/work).
  --log PATH   The log dir (default <work>/logs).
  -h, --help   Show this message and exit.
The THESEUS_DISPATCH_{ROOT,WORK,LOG,DATA,CHECKPOINTS,RESULTS,STATUS}_OVERRIDE variables do the
same from the environment (the flags win).
THESEUS_USAGE
}

# theseus_usage_error MESSAGE: the message, the usage line, exit 2.
theseus_usage_error() {
  theseus_log "error: $1"
  echo "Usage: bash SCRIPT [--root PATH] [--work PATH] [--log PATH] (-h for help)" >&2
  exit 2
}

# theseus_abs PATH: PATH made absolute against the directory the script was started from.
theseus_abs() {
  case $1 in
    /*) printf '%s' "$1" ;;
    *) printf '%s/%s' "${PWD%/}" "$1" ;;
  esac
}

while (($# > 0)); do
  theseus_flag=$1
  case $theseus_flag in
    --root | --work | --log)
      (($# >= 2)) || theseus_usage_error "$theseus_flag needs a value"
      theseus_value=$2
      shift 2
      ;;
    --root=* | --work=* | --log=*)
      theseus_value=${theseus_flag#*=}
      theseus_flag=${theseus_flag%%=*}
      shift
      ;;
    -h | --help)
      theseus_usage
      exit 0
      ;;
    --)
      shift
      (($# == 0)) || theseus_usage_error "unexpected argument after --: $1"
      break
      ;;
    *) theseus_usage_error "unknown argument: $theseus_flag" ;;
  esac
  [[ -n "$theseus_value" ]] || theseus_usage_error "$theseus_flag needs a non-empty path"
  theseus_value=$(theseus_abs "$theseus_value")
  case $theseus_flag in
    --root) export THESEUS_DISPATCH_ROOT_OVERRIDE=$theseus_value ;;
    --work) export THESEUS_DISPATCH_WORK_OVERRIDE=$theseus_value ;;
    --log) export THESEUS_DISPATCH_LOG_OVERRIDE=$theseus_value ;;
  esac
done

theseus_given_root=${THESEUS_DISPATCH_ROOT_OVERRIDE:-}
if ((theseus_paths_require_root)) && [[ -z "${theseus_given_root//[[:space:]]/}" ]]; then
  theseus_usage_error "this script was made without --root: pass --root PATH"
fi
for theseus_tool in base64 tar gzip sed; do
  command -v "$theseus_tool" > /dev/null 2>&1 || theseus_die "this script needs $theseus_tool, which is not on PATH"
done

theseus_resolve_paths
theseus_work=$THESEUS_WORK_DIR
# A run id of this start (the script may be run many times): the time and 24 random bits.
theseus_run_id="$(date -u +%Y%m%d-%H%M%S)-$(printf '%06x' $(((RANDOM << 15 | RANDOM) & 0xffffff)))"

theseus_log "extracting the code into $theseus_work (run $theseus_run_id)"
mkdir -p -- "$theseus_work/.theseus"
theseus_payload | base64 -d | tar -xzf - -C "$theseus_work" \
  || theseus_die "cannot extract the code into $theseus_work"
# The bootstrap files, with this start's run id.
for ((theseus_i = 0; theseus_i < ${#theseus_files[@]}; theseus_i++)); do
  theseus_target="$theseus_work/${theseus_files[theseus_i]}"
  mkdir -p -- "${theseus_target%/*}"
  "theseus_file_$theseus_i" | base64 -d | sed "s/$theseus_run_id_token/$theseus_run_id/g" > "$theseus_target.tmp.$$" \
    || theseus_die "cannot write $theseus_target"
  mv -f -- "$theseus_target.tmp.$$" "$theseus_target"
done
chmod +x -- "$theseus_work/$theseus_entry"
exec bash "$theseus_work/$theseus_entry"
