# The checkpoint list of bootstrap.sh (theseus), static: functions only. Rank 0 calls
# theseus_write_checkpoints with each metadata write (at the start, at every heartbeat and at
# the end): it writes $THESEUS_RUN_DIR/checkpoints.json, what the dashboard shows of a run's
# checkpoints, atomically (a temp file renamed over it):
#   {"dir": "<THESEUS_CHECKPOINT_DIR>", "latest": "<the latest marker's first line>" | null,
#    "checkpoints": [{"name": "...", "modified": "<RFC 3339, UTC>"}, ...], "written_at": "..."}
# The checkpoints are the entries of the checkpoint dir other than `latest` and hidden ones,
# newest first (by modification time), at most 100. A name is any bytes: every value is
# JSON-escaped (quotes, backslashes, control characters; bytes that are not UTF-8 are written as
# the Latin-1 characters of their values, so that the file is always valid JSON).

# theseus_json_string TEXT: TEXT as a JSON string (with its quotes), on stdout.
theseus_json_string() {
  local s=$1 LC_ALL=C c i hex out=""
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  if [[ "$s" == *[[:cntrl:]]* ]]; then
    s=${s//$'\n'/\\n}
    s=${s//$'\t'/\\t}
    s=${s//$'\r'/\\r}
    for ((i = 1; i < 32; i++)); do
      printf -v hex '%02x' "$i"
      printf -v c "\\x$hex"
      s=${s//"$c"/\\u00$hex}
    done
  fi
  # Bytes above 0x7f that are not UTF-8 (iconv says so; without iconv, every such byte).
  if [[ "$s" == *[$'\x80'-$'\xff']* ]] \
    && ! { command -v iconv > /dev/null 2>&1 && printf '%s' "$s" | iconv -f UTF-8 -t UTF-8 > /dev/null 2>&1; }; then
    for ((i = 0; i < ${#s}; i++)); do
      c=${s:i:1}
      if [[ "$c" == [$'\x80'-$'\xff'] ]]; then
        printf -v hex '%02x' "'$c"
        out+="\\u00$hex"
      else
        out+=$c
      fi
    done
    s=$out
  fi
  printf '"%s"' "$s"
}

# theseus_checkpoint_entries DIR: the entries of DIR but `latest` and hidden ones, newest
# first, at most 100, each as `SECONDS.FRACTION YYYY-MM-DDTHH:MM:SS.FRACTION NAME` ended by NUL.
theseus_checkpoint_entries() {
  # One process for the whole dir (GNU find); NUL-separated, so a name may hold newlines.
  TZ=UTC LC_ALL=C find "$1" -mindepth 1 -maxdepth 1 ! -name latest ! -name '.*' \
    -printf '%T@ %TY-%Tm-%TdT%TH:%TM:%TS %f\0' 2> /dev/null \
    | LC_ALL=C sort -z -r -n -k 1,1 2> /dev/null | head -z -n 100 2> /dev/null
}

# theseus_write_checkpoints: (re)writes $THESEUS_RUN_DIR/checkpoints.json; best effort.
theseus_write_checkpoints() {
  local dir=${THESEUS_CHECKPOINT_DIR:-} file="$THESEUS_RUN_DIR/checkpoints.json" tmp latest=null line
  local entry stamp when name first=1
  tmp="$file.tmp.$BASHPID"
  if [[ -f "$dir/latest" && -r "$dir/latest" ]]; then
    line=$(head -c 4096 -- "$dir/latest" 2> /dev/null | head -n 1 | tr -d '\000') || line=""
    line=${line%$'\r'}
    line="${line#"${line%%[![:space:]]*}"}"
    line="${line%"${line##*[![:space:]]}"}"
    while [[ "$line" == */ && "$line" != / ]]; do line=${line%/}; done
    # An absolute path into the dir names the checkpoint as the list does.
    [[ "$line" != "$dir/"* ]] || line=${line#"$dir/"}
    [[ -z "$line" ]] || latest=$(theseus_json_string "$line")
  fi
  {
    printf '{"dir": %s, "latest": %s, "checkpoints": [' "$(theseus_json_string "$dir")" "$latest"
    if [[ -n "$dir" && -d "$dir" ]]; then
      while IFS= read -r -d '' entry; do
        stamp=${entry%% *}
        entry=${entry#* }
        when=${entry%% *}
        name=${entry#* }
        [[ "$stamp" =~ ^[0-9]+(\.[0-9]*)?$ && "$when" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2} ]] \
          || continue
        ((first)) || printf ','
        first=0
        printf '\n  {"name": %s, "modified": "%sZ"}' "$(theseus_json_string "$name")" "${when:0:19}"
      done < <(theseus_checkpoint_entries "$dir")
    fi
    ((first)) || printf '\n'
    printf '], "written_at": "%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } > "$tmp" && mv -f -- "$tmp" "$file" || {
    rm -f -- "$tmp"
    return 1
  }
}
