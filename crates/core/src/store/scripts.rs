//! The store's scripts: POSIX `sh`, run as `sh -c SCRIPT theseus-store ARGS...`, with values
//! only as positional arguments. They need `tar`, `sha256sum`, `find`, `xargs`, `awk`, `mv`,
//! `cp`, `chmod`, `mkdir`, `rm`, `cat`, `head` and `wc`, all of which busybox has, and `LC_ALL=C` for
//! messages.
//!
//! The two scripts that read an archive ([`UPLOAD`], [`MATERIALIZE`]) take its exact length as
//! their last argument and read exactly that many bytes (`head -c`): they never wait for stdin
//! to close (a `v4.channel.k8s.io` exec cannot close it), and the archive is extracted as it
//! streams in, never stored whole first. What arrived is checked by the scripts themselves: each
//! object against its name, the object count, and the run dir's token entry.

/// `OBJECTS`, keys on stdin (one per line): prints the keys the store lacks. Checks the tools
/// first (exit [`super::EXIT_NO_TOOL`] naming the missing one), creates the store, and drops
/// objects written since they were stored (their mtime is no longer 0), so that a tampered
/// object is sent again rather than linked. The keys (hex, `/` and `.x` only) reach the test
/// through `xargs`: `sh`'s `read` takes a system call per byte, which cost a quarter of a
/// second for 10,000 keys; `[ -f ]` is a builtin, so there is no process per key.
pub const MISSING: &str = r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-store: %s\n' "$*" >&2; exit "$code"; }
objs=$1
for tool in tar sha256sum find xargs awk mv cp chmod mkdir rm cat head wc; do
  command -v "$tool" >/dev/null 2>&1 || fail 40 "$tool"
done
mkdir -p -- "$objs" || fail 20 "cannot create the object store $objs"
find "$objs" -type f -mtime -3650 -print | xargs rm -f -- || fail 20 "cannot check the object store $objs"
cd -- "$objs" || fail 20 "cannot enter the object store $objs"
xargs sh -c 'for key do [ -f "$key" ] || printf "%s\n" "$key"; done' theseus-store
"#;

/// `OBJECTS INCOMING COUNT LEN`, a tar of `LEN` bytes of objects on stdin (entries
/// `ab/cdef…[.x]`, read-only modes, mtime 0): extracts into the private dir `INCOMING` (on the
/// store's filesystem) as it arrives, and hashes the objects in batches of 128 once the entry
/// after each batch begins (`tar -v` names an entry when it starts), so the check runs while the
/// archive streams in (a hasher per 16 objects started 625 of them for 10,000 files: 1.7 s of
/// `openssl` start-up alone).
/// The fastest tools at hand do the two costly steps, measured on 500 MiB on this project's
/// 2-core machine: `openssl dgst` (SHA extensions: 0.3 s of CPU) where it works, else
/// `sha256sum` (coreutils 9.1: 1.2 s; busybox 1.35: 2.4 s); and GNU `head -c` to cut the
/// archive from stdin, else `dd bs=512 iflag=count_bytes` (busybox `head -c` moves a byte at a
/// time: 2.0 s, against 1.0 s; busybox `dd` fills whole blocks, so a block size that divides
/// `LEN` never reads past the archive and never waits for a stdin that stays open). Then:
/// every object against its name (exit [`super::EXIT_CORRUPT`] naming a mismatch),
/// checks that `COUNT` objects arrived, then renames them into place: the prefix dirs the store
/// lacks with one `mv` (each a single rename; one that a concurrent upload created meanwhile
/// fails and is done as the others), then one `mv` per remaining prefix dir.
/// `INCOMING` is removed on every exit, also when a lost connection makes a write to stderr
/// raise SIGPIPE (its default action would end `sh` without running the EXIT trap). Prints
/// `stored N`.
pub const UPLOAD: &str = r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-store: %s\n' "$*" >&2; exit "$code"; }
objs=$1 tmp=$2 want=$3 len=$4
sums="$tmp/sums" got="$tmp/objects"
trap 'rm -rf -- "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 141' PIPE
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p -- "$got" "$objs" || fail 20 "cannot create $got"
hash=sha256sum
empty=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
if command -v openssl >/dev/null 2>&1 &&
  [ "$(printf '' | openssl dgst -sha256 -r 2>/dev/null)" = "$empty *stdin" ]; then
  hash='openssl dgst -sha256 -r'
fi
case $(head --version 2>/dev/null) in
  *GNU*) fast_head=1 ;;
  *) fast_head=0 ;;
esac
if [ "$fast_head" = 1 ]; then
  take() { head -c "$1"; }
elif [ "$((len % 512))" -eq 0 ] && [ "$(printf abcd | dd bs=2 count=2 iflag=count_bytes 2>/dev/null)" = ab ]; then
  take() { dd bs=512 count="$1" iflag=count_bytes 2>/dev/null; }
else
  take() { head -c "$1"; }
fi
rc=$( { { take "$len" | tar -x -v -f - -C "$got"; echo "$?" >&3; } |
  awk 'NR > 1 { print prev; fflush() } { prev = $0 } END { if (NR) print prev }' |
  { cd -- "$got" && xargs -r -n 128 $hash; } > "$sums"; } 3>&1 )
[ "$rc" = 0 ] || fail 12 "tar exited with status $rc"
cd -- "$got" || fail 20 "cannot enter $got"
checked=$(awk '
  NF == 0 { next }
  { name = $2; sub(/^\*/, "", name); sub(/^\.\//, "", name); key = name; sub(/\.x$/, "", key); sub(/\//, "", key)
    if ($1 != key) { print "bad " name " " $1; exit } n++ }
  END { print "ok " n + 0 }' "$sums") || fail 21 "cannot check the received objects"
case $checked in
  bad*) set -- $checked; fail 41 "object $2 arrived corrupt (its sha256 is $3)" ;;
esac
files=$(find . -type f -print | wc -l) || fail 21 "cannot count the received objects"
[ "$((files + 0))" -eq "$want" ] || fail 12 "received $((files + 0)) files for $want objects"
[ "$checked" = "ok $want" ] || fail 12 "received ${checked#ok } of $want objects"
new=
for d in */; do
  d=${d%/}
  [ -d "$d" ] && [ ! -e "$objs/$d" ] && new="$new $d"
done
[ -z "$new" ] || mv -f -- $new "$objs/" 2>/dev/null
for d in */; do
  d=${d%/}
  [ -d "$d" ] || continue
  mkdir -p -- "$objs/$d" || fail 20 "cannot create $objs/$d"
  mv -f -- "$d"/* "$objs/$d/" || fail 22 "cannot move objects into $objs/$d"
done
echo "stored $want"
"#;

/// `ROOT DEST TOKEN MODE LEN`, a tar of `LEN` bytes on stdin with entries relative to `ROOT`:
/// builds the run dir
/// `ROOT/DEST` under `DEST.partial`. In `link` mode the archive's hard-link entries link the
/// store's objects in; in `copy` mode its symlinks under `DEST.partial.copy` point at them and
/// `cp -R -L` makes private, writable copies. The run dir is renamed into place only when the
/// token entry ([`super::SENTINEL`]) holds `TOKEN`; a missing object (a concurrent `gc`)
/// exits [`super::EXIT_OBJECT_GONE`], an existing run dir [`super::EXIT_EXISTS`]; every
/// failure removes what it made. In `link` mode the code manifest ([`super::manifest::MANIFEST`])
/// and, when the run dir has one, the tree archive ([`super::tree::TREE`]) become objects too (read-only, mtime 0, shared by every run of the same tree); where
/// that cannot be done it stays the run's own file.
pub const MATERIALIZE: &str = r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-store: %s\n' "$*" >&2; exit "$code"; }
root=$1 dest=$2 token=$3 mode=$4 len=$5
partial="$dest.partial"
cd -- "$root" || fail 20 "cannot enter $root"
[ -e "$dest" ] && fail 17 "run dir $root/$dest already exists"
clean() { rm -rf -- "$partial" "$partial.copy"; }
trap 'clean; exit 129' HUP
trap 'clean; exit 141' PIPE
trap 'clean; exit 130' INT
trap 'clean; exit 143' TERM
clean
mkdir -p -- "$partial" || fail 20 "cannot create $root/$partial"
if ! err=$(head -c "$len" | tar -x -m -f - 2>&1 >/dev/null); then
  clean
  case $err in
    *"No such file"*) fail 42 "an object of the store is gone: $err" ;;
  esac
  fail 12 "tar failed: $err"
fi
if [ "$mode" = copy ] && [ -d "$partial.copy" ]; then
  cp -R -L -- "$partial.copy/." "$partial/" || { clean; fail 23 "cannot copy objects into $root/$partial"; }
  chmod -R u+w -- "$partial" || { clean; fail 23 "cannot make $root/$partial writable"; }
  rm -rf -- "$partial.copy"
fi
if [ "$(cat -- "$partial/.theseus/ship-complete" 2>/dev/null)" != "$token" ]; then
  clean
  fail 3 "the code archive arrived incomplete"
fi
rm -f -- "$partial/.theseus/ship-complete"
for m in "$partial/.theseus/code-manifest.json" "$partial/.theseus/code-tree.tar"; do
  if [ "$mode" = link ] && [ -f "$m" ] && sum=$(sha256sum < "$m") && chmod 444 "$m" && touch -m -d @0 "$m"; then
    sum=${sum%% *}
    pre=${sum%"${sum#??}"}
    obj=".theseus/objects/$pre/${sum#??}"
    if mkdir -p -- ".theseus/objects/$pre" && ! ln -- "$m" "$obj" 2>/dev/null; then
      ln -- "$obj" "$m.link" 2>/dev/null && mv -f -- "$m.link" "$m"
    fi
  fi
done
[ -e "$dest" ] && { clean; fail 17 "run dir $root/$dest already exists"; }
mv -- "$partial" "$dest" || { clean; fail 24 "cannot rename $root/$partial into place"; }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_valid_shell() {
        for script in [MISSING, UPLOAD, MATERIALIZE] {
            let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(script).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        assert!(MATERIALIZE.contains(super::super::SENTINEL));
    }
}
