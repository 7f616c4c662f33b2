//! Reclaiming space on a cluster: old run code dirs, leftovers of crashed submits and objects
//! that no run links any more, written once for every backend as POSIX `sh` scripts run through
//! a [`Shell`], with pure parsing of what they print.
//!
//! [`RECLAIM`] removes, under a cluster's work root:
//! - the code dir `<work>/<project>/<group>/<name>/<run>` (it holds `.theseus/`) of every run
//!   that is not live and whose code dir and log file (when the cluster keeps logs on the same
//!   machine) were last modified before `older_than`; the run's log and status files stay;
//! - `<run>.partial` and `<run>.partial.copy` dirs and `<work>/.theseus/incoming/*` upload dirs
//!   in which nothing changed for [`LEFTOVER_GRACE`], so that a submit in flight is never hit
//!   (nor the partial dir of a run given as live); those of a run given as abandoned (its
//!   submit is over: finished, or its client was killed) at once;
//! - objects of `<work>/.theseus/objects` that no run dir links any more (link count 1) and whose
//!   ctime (their last upload, link or unlink) was before `older_than` when the reclaim started.
//!   The ctimes are read before any run dir goes, so the objects of the run dirs removed in the
//!   same pass go too. An object that a concurrent submit links between the check and the removal
//!   keeps its run's copy (a hard link); the submit that finds it gone ships it again (see
//!   [`super::EXIT_OBJECT_GONE`]).
//!
//! Which runs are live comes from outside: the CLI gives the ledger's pending and running runs and
//! each backend adds what it sees running; the script gets them on stdin, one run path
//! (`<project>/<group>/<name>/<run>`, relative to the work root) a line. Everything else is a
//! positional argument. This is `git gc --prune=<date>`'s rule (unreachable and older than a
//! grace) with link counts standing in for reachability.
//!
//! [`USAGE`] counts the store's objects, those no run links, and the run code dirs with the bytes
//! only they hold (files linked from the store count once, under the objects).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{EXIT_NO_TOOL, ScriptCall, Shell, ShellError};
use crate::{Error, Result};

/// How long a `.partial` or upload dir must have been left unchanged before it is taken for a
/// crashed submit's.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(3600);

/// What a reclaim may remove, and what it must not touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReclaimOptions {
    /// Only run code dirs (and objects) unchanged for this long.
    pub older_than: Duration,
    /// Runs that are pending or running somewhere (the ledger's, the backend's), as run paths
    /// `<project>/<group>/<name>/<run>` ([`crate::job::JobIdentity::run_path`]): never touched.
    pub live: BTreeSet<String>,
    /// Runs whose submit is over, finished or stopped with its client (the CLI gives the
    /// ledger's runs whose submit lock nobody holds), as run paths: a `.partial` or upload dir
    /// of theirs will never be finished, and goes without waiting for [`LEFTOVER_GRACE`].
    pub abandoned: BTreeSet<String>,
    /// List what would be removed; remove nothing.
    pub dry_run: bool,
}

/// Where a cluster's files are, on the machine a [`Shell`] reaches (absolute paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReclaimTarget {
    /// The work root (run code dirs and the store).
    pub work: String,
    /// The log dir (`<log>/<run path>.log`), when it is on that machine: a run whose log was
    /// written recently is not old.
    pub log_dir: Option<String>,
    /// Dirs under the work root that are never scanned (the log, status and share dirs).
    pub skip: Vec<String>,
}

impl ReclaimTarget {
    /// The target of a cluster's dirs, each made absolute by `resolve` (`~` expansion): the
    /// work root, with its log, status and share dirs skipped when they lie under it.
    pub fn of_cluster(
        cluster: &crate::cluster::ClusterConfig,
        resolve: impl Fn(&str) -> Result<String>,
    ) -> Result<ReclaimTarget> {
        let work = resolve(&cluster.work)?;
        let log = resolve(&cluster.log_dir())?;
        let skip = [log.clone(), resolve(&cluster.status_dir())?, resolve(&cluster.share_dir())?]
            .into_iter()
            .filter(|d| crate::paths::check_under(&work, d).is_ok())
            .collect();
        Ok(ReclaimTarget { work, log_dir: Some(log), skip })
    }
}

/// The kind of a removed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimKind {
    /// A finished run's code dir.
    RunDir,
    /// A `.partial` dir of a crashed submit.
    Partial,
    /// An upload dir of a crashed submit.
    Incoming,
    /// An object no run links.
    Object,
}

impl ReclaimKind {
    fn parse(word: &str) -> Option<ReclaimKind> {
        Some(match word {
            "run" => ReclaimKind::RunDir,
            "partial" => ReclaimKind::Partial,
            "incoming" => ReclaimKind::Incoming,
            "object" => ReclaimKind::Object,
            _ => return None,
        })
    }

    /// How it is named in messages.
    pub fn describe(self) -> &'static str {
        match self {
            ReclaimKind::RunDir => "run code dir",
            ReclaimKind::Partial => "partial code dir",
            ReclaimKind::Incoming => "upload dir",
            ReclaimKind::Object => "object",
        }
    }
}

/// One removed (or, in a dry run, removable) item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReclaimedItem {
    /// What it is.
    pub kind: ReclaimKind,
    /// Its absolute path.
    pub path: String,
    /// Bytes it frees (files only it holds).
    pub bytes: u64,
}

/// What a reclaim did (or would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReclaimReport {
    /// Removed items, in the order the script found them.
    pub items: Vec<ReclaimedItem>,
    /// Items that could not be removed, with why (`path: message`).
    pub failed: Vec<String>,
    /// Whether nothing was removed (a dry run).
    pub dry_run: bool,
    /// Bytes freed (or that would be).
    pub freed_bytes: u64,
}

impl ReclaimReport {
    /// Number and bytes of the items of one kind.
    pub fn total(&self, kind: ReclaimKind) -> (usize, u64) {
        self.items.iter().filter(|i| i.kind == kind).fold((0, 0), |(n, b), i| (n + 1, b + i.bytes))
    }
}

/// Space used on a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreUsage {
    /// Objects in the store.
    pub objects: u64,
    /// Their bytes.
    pub object_bytes: u64,
    /// Objects no run dir links (what `gc` can remove).
    pub unused_objects: u64,
    /// Their bytes.
    pub unused_object_bytes: u64,
    /// Run code dirs.
    pub run_dirs: u64,
    /// Bytes only the run code dirs hold (files linked from the store count under the objects).
    pub run_dir_bytes: u64,
    /// `.partial` and upload dirs.
    pub leftovers: u64,
    /// Their bytes.
    pub leftover_bytes: u64,
}

/// Shared head of both scripts: `fail`, the tool check, and the helpers. `bytes DIR` sums the
/// sizes of the files under DIR that have one link; `newest PATH...` is the newest mtime under
/// them; `skipped REL` is true for paths under a skipped dir (`$@` holds them); `plain REL` is
/// false when a component of REL is a symlink or has a character outside the name rule.
macro_rules! head {
    () => {
        r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-store: %s\n' "$*" >&2; exit "$code"; }
for tool in find stat sort uniq head tail mktemp xargs rm chmod date cat grep; do
  command -v "$tool" >/dev/null 2>&1 || fail 40 "$tool"
done
bytes() {
  t=0
  for s in $(find "$1" -type f -links 1 -exec stat -c %s {} + 2>/dev/null); do t=$((t + s)); done
  echo "$t"
}
newest() { find "$@" -exec stat -c %Y {} + 2>/dev/null | sort -n | tail -n 1; }
skipped() {
  for s in "$@"; do
    case "$work/$rel" in "$s"|"$s"/*) return 0 ;; esac
  done
  return 1
}
plain() {
  case $1 in *[!A-Za-z0-9._/-]*) return 1 ;; esac
  x=$1
  while [ -n "$x" ] && [ "$x" != . ]; do
    [ -L "$x" ] && return 1
    case $x in */*) x=${x%/*} ;; *) x=. ;; esac
  done
  return 0
}
"#
    };
}

/// `WORK OLDER_SECONDS GRACE_SECONDS DRY LOG_DIR SKIP...`, on stdin `L PATH` per live run and
/// `A PATH` per abandoned run (upload dirs are named `<run id>.<random>`): removes what
/// the module docs say (nothing when `DRY` is 1) and prints one `KIND<TAB>BYTES<TAB>PATH` line per
/// item (`KIND` = `run`, `partial`, `incoming`, `object`; `PATH` relative to `WORK`),
/// `failed<TAB>PATH<TAB>MESSAGE` per item it could not remove, and `end` last.
pub const RECLAIM: &str = concat!(
    head!(),
    r#"work=$1 older=$2 grace=$3 dry=$4 logs=$5
shift 5
[ -d "$work" ] || { cat > /dev/null; echo end; exit 0; }
cd -- "$work" || fail 20 "cannot enter $work"
now=$(date +%s) || fail 20 "date failed"
cut=$((now - older)) pcut=$((now - grace))
tmp=$(mktemp -d) || fail 20 "cannot make a temp dir"
trap 'rm -rf -- "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
cat > "$tmp/in" || fail 20 "cannot read the live runs"
sed -n 's/^L //p' "$tmp/in" > "$tmp/live"
sed -n 's/^A //p' "$tmp/in" > "$tmp/abandoned"
sed 's#.*/##' "$tmp/abandoned" > "$tmp/abandoned_ids"
objs=.theseus/objects
: > "$tmp/old"
if [ -d "$objs" ] && [ ! -L "$objs" ] && [ ! -L .theseus ]; then
  find "$objs" -type f -exec stat -c '%Z %n' {} + | while read -r c n; do
    [ "$c" -le "$cut" ] && printf '%s\n' "$n"
  done > "$tmp/old"
fi
remove() {
  if [ "$dry" != 1 ] && ! rm -rf -- "$2" 2>/dev/null; then
    find "$2" -type d -exec chmod u+w {} + 2>/dev/null
    if ! rm -rf -- "$2" 2>"$tmp/err"; then
      printf 'failed\t%s\t%s\n' "$2" "$(head -n 1 "$tmp/err")"
      return
    fi
  fi
  printf '%s\t%s\t%s\n' "$1" "$3" "$2"
}
for rel in */*/*/*; do
  [ -d "$rel" ] && plain "$rel" || continue
  skipped "$@" && continue
  case $rel in
    *.partial|*.partial.copy)
      run=${rel%.copy}
      if grep -qxF -- "${run%.partial}" "$tmp/abandoned"; then
        remove partial "$rel" "$(bytes "$rel")"
        continue
      fi
      grep -qxF -- "${run%.partial}" "$tmp/live" && continue
      m=$(newest "$rel")
      [ -n "$m" ] && [ "$m" -lt "$pcut" ] && remove partial "$rel" "$(bytes "$rel")"
      continue ;;
  esac
  [ -d "$rel/.theseus" ] || continue
  grep -qxF -- "$rel" "$tmp/live" && continue
  m=$(stat -c %Y -- "$rel") || continue
  if [ -n "$logs" ] && [ -f "$logs/$rel.log" ]; then
    l=$(stat -c %Y -- "$logs/$rel.log") && [ "$l" -gt "$m" ] && m=$l
  fi
  [ "$m" -le "$cut" ] || continue
  remove run "$rel" "$(bytes "$rel")"
done
for rel in .theseus/incoming/*; do
  [ -d "$rel" ] && plain "$rel" || continue
  id=${rel##*/} id=${id%%.*}
  if [ -n "$id" ] && grep -qxF -- "$id" "$tmp/abandoned_ids"; then
    remove incoming "$rel" "$(bytes "$rel")"
    continue
  fi
  m=$(newest "$rel")
  [ -n "$m" ] && [ "$m" -lt "$pcut" ] && remove incoming "$rel" "$(bytes "$rel")"
done
if [ -s "$tmp/old" ]; then
  find "$objs" -type f -links 1 -print > "$tmp/unused"
  sort "$tmp/old" "$tmp/unused" | uniq -d | grep -x '[A-Za-z0-9._/-]*' > "$tmp/gone"
  if [ -s "$tmp/gone" ]; then
    xargs stat -c '%s %n' < "$tmp/gone" > "$tmp/sizes" 2>/dev/null
    [ "$dry" = 1 ] || xargs rm -f -- < "$tmp/gone"
    while read -r s n; do
      if [ "$dry" = 1 ] || [ ! -e "$n" ]; then
        printf 'object\t%s\t%s\n' "$s" "$n"
      else
        printf 'failed\t%s\t%s\n' "$n" "cannot remove it"
      fi
    done < "$tmp/sizes"
  fi
fi
echo end
"#
);

/// `WORK SKIP...`: prints `objects N BYTES`, `unused N BYTES`, `runs N BYTES` and
/// `leftovers N BYTES` (see [`StoreUsage`]).
pub const USAGE: &str = concat!(
    head!(),
    r#"work=$1
shift 1
sum() { n=0 t=0; while read -r s; do n=$((n + 1)); t=$((t + s)); done; echo "$n $t"; }
objs=.theseus/objects
if ! [ -d "$work" ]; then
  printf 'objects 0 0\nunused 0 0\nruns 0 0\nleftovers 0 0\n'
  exit 0
fi
cd -- "$work" || fail 20 "cannot enter $work"
if [ -d "$objs" ] && [ ! -L "$objs" ] && [ ! -L .theseus ]; then
  echo "objects $(find "$objs" -type f -exec stat -c %s {} + | sum)"
  echo "unused $(find "$objs" -type f -links 1 -exec stat -c %s {} + | sum)"
else
  printf 'objects 0 0\nunused 0 0\n'
fi
rn=0 rt=0 ln=0 lt=0
for rel in */*/*/* .theseus/incoming/*; do
  [ -d "$rel" ] && plain "$rel" || continue
  skipped "$@" && continue
  case $rel in
    *.partial|*.partial.copy|.theseus/incoming/*) ln=$((ln + 1)); lt=$((lt + $(bytes "$rel"))); continue ;;
  esac
  [ -d "$rel/.theseus" ] || continue
  rn=$((rn + 1)); rt=$((rt + $(bytes "$rel")))
done
echo "runs $rn $rt"
echo "leftovers $ln $lt"
"#
);

/// Runs [`RECLAIM`] on `target` through `shell`.
pub async fn reclaim(shell: &dyn Shell, target: &ReclaimTarget, options: &ReclaimOptions) -> Result<ReclaimReport> {
    let work = target.work.trim_end_matches('/').to_owned();
    let mut args = vec![
        work.clone(),
        options.older_than.as_secs().to_string(),
        LEFTOVER_GRACE.as_secs().to_string(),
        if options.dry_run { "1" } else { "0" }.to_owned(),
        target.log_dir.clone().unwrap_or_default(),
    ];
    args.extend(target.skip.iter().cloned());
    let live: Vec<u8> = (options.live.iter().map(|p| format!("L {p}\n")))
        .chain(options.abandoned.iter().map(|p| format!("A {p}\n")))
        .flat_map(String::into_bytes)
        .collect();
    let out = shell
        .run(ScriptCall {
            script: RECLAIM,
            args,
            stdin: Some(Arc::new(move |w| w.write_all(&live))),
            stdin_len: None,
            progress: None,
            label: "the reclaim script",
        })
        .await
        .map_err(|e| failed(shell, "reclaiming space", e))?;
    let mut report = parse_reclaim(&String::from_utf8_lossy(&out), &work)
        .map_err(|m| Error::backend("store", format!("the reclaim on {} answered nonsense: {m}", shell.describe())))?;
    report.dry_run = options.dry_run;
    Ok(report)
}

/// Runs [`USAGE`] on `target` through `shell`.
pub async fn usage(shell: &dyn Shell, target: &ReclaimTarget) -> Result<StoreUsage> {
    let mut args = vec![target.work.trim_end_matches('/').to_owned()];
    args.extend(target.skip.iter().cloned());
    let out = shell
        .run(ScriptCall {
            script: USAGE,
            args,
            stdin: None,
            stdin_len: None,
            progress: None,
            label: "the usage script",
        })
        .await
        .map_err(|e| failed(shell, "measuring the store", e))?;
    parse_usage(&String::from_utf8_lossy(&out)).map_err(|m| {
        Error::backend("store", format!("the usage script on {} answered nonsense: {m}", shell.describe()))
    })
}

fn failed(shell: &dyn Shell, what: &str, e: ShellError) -> Error {
    let machine = shell.describe();
    match e {
        ShellError::Exit { code: EXIT_NO_TOOL, stderr } => Error::backend(
            "store",
            format!(
                "{what} on {machine} needs `{}`, which is not installed there",
                stderr.trim().trim_start_matches("theseus-store: ")
            ),
        ),
        e => Error::backend("store", format!("{what} on {machine} failed: {e}")),
    }
}

/// Reads [`RECLAIM`]'s output; paths become absolute under `work`. Fails on an unknown line or a
/// missing `end` (the script was cut short).
pub fn parse_reclaim(out: &str, work: &str) -> std::result::Result<ReclaimReport, String> {
    let mut report = ReclaimReport::default();
    let mut ended = false;
    for line in out.lines().filter(|l| !l.is_empty()) {
        if line == "end" {
            ended = true;
            continue;
        }
        let mut fields = line.splitn(3, '\t');
        let (Some(kind), Some(second), Some(third)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!("unexpected line `{line}`"));
        };
        if kind == "failed" {
            report.failed.push(format!("{work}/{second}: {third}"));
            continue;
        }
        let kind = ReclaimKind::parse(kind).ok_or_else(|| format!("unknown item kind in `{line}`"))?;
        let bytes = second.parse().map_err(|_| format!("bad size in `{line}`"))?;
        report.freed_bytes += bytes;
        report.items.push(ReclaimedItem { kind, path: format!("{work}/{third}"), bytes });
    }
    if !ended {
        return Err("its output ended early (no `end` line)".into());
    }
    Ok(report)
}

/// Reads [`USAGE`]'s output.
pub fn parse_usage(out: &str) -> std::result::Result<StoreUsage, String> {
    let mut usage = StoreUsage::default();
    let mut seen = 0;
    for line in out.lines().filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [what, n, bytes] = words[..] else { return Err(format!("unexpected line `{line}`")) };
        let (n, bytes): (u64, u64) = match (n.parse(), bytes.parse()) {
            (Ok(n), Ok(b)) => (n, b),
            _ => return Err(format!("bad numbers in `{line}`")),
        };
        let slot = match what {
            "objects" => (&mut usage.objects, &mut usage.object_bytes),
            "unused" => (&mut usage.unused_objects, &mut usage.unused_object_bytes),
            "runs" => (&mut usage.run_dirs, &mut usage.run_dir_bytes),
            "leftovers" => (&mut usage.leftovers, &mut usage.leftover_bytes),
            _ => return Err(format!("unknown line `{line}`")),
        };
        (*slot.0, *slot.1) = (n, bytes);
        seen += 1;
    }
    if seen != 4 {
        return Err(format!("{seen} of 4 lines"));
    }
    Ok(usage)
}

#[cfg(test)]
mod tests;
