//! The scripts of [`super`]: POSIX `sh`, values only as positional arguments, the same tools as
//! the ship's scripts ([`crate::store::scripts`]).

/// `RUN_DIR`: prints the run dir's code manifest; exits [`super::EXIT_NO_MANIFEST`] without
/// one and [`super::EXIT_NO_RUN_DIR`] when the run dir is gone.
pub const READ: &str = r#"set -u
[ -d "$1" ] || { printf 'theseus-store: run dir %s is gone\n' "$1" >&2; exit 45; }
[ -f "$1/.theseus/code-manifest.json" ] || exit 44
cat -- "$1/.theseus/code-manifest.json"
"#;

/// `ROOT DEST TOKEN MODE`, the sync archive on stdin (entries relative to `ROOT`, under the
/// stage dir `DEST/.theseus/sync.TOKEN`): checks the token entry, makes copies in `copy`
/// mode, deletes each `del/` path from the run dir (and the dirs that became empty), then
/// moves each `add/` entry into place with `mv -f`, a rename, and the new manifest last. Paths go from `find` to the
/// shell as arguments, never as lines, so any file name survives. The stage is removed on
/// every exit. Prints `synced`.
pub const APPLY: &str = r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-store: %s\n' "$*" >&2; exit "$code"; }
root=$1 dest=$2 token=$3 mode=$4
cd -- "$root" || fail 20 "cannot enter $root"
[ -d "$dest" ] || fail 45 "run dir $root/$dest is gone"
stage="$root/$dest/.theseus/sync.$token"
work="$root/$dest"
trap 'rm -rf -- "$stage"' EXIT
trap 'exit 129' HUP
trap 'exit 141' PIPE
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p -- "$stage" || fail 20 "cannot create $stage"
if ! err=$(tar -x -m -f - 2>&1 >/dev/null); then
  case $err in
    *"No such file"*) fail 42 "an object of the store is gone: $err" ;;
  esac
  fail 12 "tar failed: $err"
fi
[ "$(cat -- "$stage/complete" 2>/dev/null)" = "$token" ] || fail 3 "the sync archive arrived incomplete"
if [ "$mode" = copy ] && [ -d "$stage/copy" ]; then
  mkdir -p -- "$stage/add" || fail 23 "cannot create $stage/add"
  cp -R -L -- "$stage/copy/." "$stage/add/" || fail 23 "cannot copy objects into $stage/add"
  chmod -R u+w -- "$stage/add" || fail 23 "cannot make $stage/add writable"
fi
cd -- "$stage" || fail 20 "cannot enter $stage"
if [ -d del ]; then
  find del -type f -exec sh -c '
    w=$1; shift
    for f do
      r=${f#del/}
      rm -f -- "$w/$r" || exit 1
      d=$r
      while case $d in */*) true ;; *) false ;; esac; do
        d=${d%/*}
        rmdir -- "$w/$d" 2>/dev/null || break
      done
    done' theseus-store "$work" {} + || fail 25 "cannot delete files from $work"
fi
# A sync that only deletes sends no file: no `add` dir.
if [ -d add ]; then
  find add ! -type d -exec sh -c '
    w=$1; shift
    for f do
      r=${f#add/}
      case $r in */*) mkdir -p -- "$w/${r%/*}" || exit 1 ;; esac
      if [ -d "$w/$r" ] && [ ! -L "$w/$r" ]; then rmdir -- "$w/$r" || exit 1; fi
      mv -f -- "$f" "$w/$r" || exit 1
    done' theseus-store "$work" {} + || fail 26 "cannot move synced files into $work"
fi
# Last: a sync cut before this point is done again in full by the next one.
mv -f -- manifest.json "$work/.theseus/code-manifest.json" || fail 26 "cannot update the code manifest of $work"
echo synced
"#;
