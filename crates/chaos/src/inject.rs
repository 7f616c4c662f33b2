//! Faults in the lab's sshd: a key of its own whose `authorized_keys` line forces every command
//! through a small script. The script counts the commands of this key (every connection, every
//! multiplexed channel), logs them, and does what the plan says to the planned one:
//!
//! - `fail`: the command does not run; it exits 1 with a message on stderr (a full disk, a
//!   permission refused).
//! - `drop`: the connection dies before the command runs (the SSH master goes with it): the
//!   script kills the sshd process that serves the connection, its parent.
//! - `lost`: the command runs to its end, then the connection dies before its exit status is
//!   sent, so the client cannot tell whether it ran (an sbatch that was accepted, unheard).
//! - `lost+down` (`--full`): `lost`, and every later connection of the case dies too, so that
//!   asking the host again fails as well (the outcome stays unknown until the case ends).
//!
//! The line is removed again when the [`Injector`] is dropped, and stale lines of dead chaos
//! runs are removed when a new one starts.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The marker that ends this tool's lines in `authorized_keys`.
const MARK: &str = "theseus-chaos-pid-";

const SCRIPT: &str = r#"#!/bin/bash
# theseus-chaos: counts the commands of this key and fails the planned one (see crates/chaos).
d=$(dirname "$0")
exec 9>>"$d/lock"
flock 9
n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$d/count"
flock -u 9
exec 9>&-
cmd=${SSH_ORIGINAL_COMMAND:-}
# theseus sends `/bin/sh -c 'exec 3<&0; echo BASE64|base64 -d|/bin/sh /dev/stdin'`: log the command
# the decoded script `exec`s (after its framing lines), which names the step.
shown=$cmd
case $cmd in
  *'|base64 -d|'*)
    b=${cmd#*echo }; b=${b%%|base64 -d|*}
    if dec=$(printf '%s' "$b" | base64 -d 2>/dev/null); then shown=${dec#*$'\n'exec }; fi ;;
esac
printf '%s\t%s\n' "$n" "${shown//$'\n'/ }" >> "$d/log"
read -r at fault < "$d/plan" 2>/dev/null || at=0
if [ "$n" = "$at" ]; then
  case $fault in
    fail) echo "theseus-chaos: command $n was refused on purpose" >&2; exit 1 ;;
    drop) kill -9 "$PPID"; exit 255 ;;
    lost|lost+down) bash -c "$cmd"; kill -9 "$PPID"; exit 255 ;;
  esac
fi
# lost+down: the host stays unreachable after the lost answer, until the plan is cleared.
if [ "$fault" = lost+down ] && [ "$at" -gt 0 ] && [ "$n" -gt "$at" ]; then kill -9 "$PPID"; exit 255; fi
exec bash -c "$cmd"
"#;

/// The faults the script knows.
pub(crate) const FAULTS: &[&str] = &["fail", "drop", "lost", "lost+down"];

/// A forced-command key in the lab's `authorized_keys`.
pub(crate) struct Injector {
    dir: tempfile::TempDir,
    /// The file [`Injector::install`] added the line to (it is removed again on drop).
    authorized: Option<PathBuf>,
    line_mark: String,
    line: String,
}

impl Injector {
    /// Makes the key and adds its line to `authorized` (the lab's `authorized_keys`).
    pub(crate) fn install(authorized: &Path) -> Result<Injector, String> {
        let mut injector = Injector::make()?;
        remove_stale_lines(authorized)?;
        let mut text = std::fs::read_to_string(authorized).map_err(|e| format!("{}: {e}", authorized.display()))?;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{}\n", injector.line));
        std::fs::write(authorized, text).map_err(|e| format!("{}: {e}", authorized.display()))?;
        injector.authorized = Some(authorized.to_owned());
        Ok(injector)
    }

    /// Makes the key and the script only: [`Injector::line`] goes where the host takes its keys
    /// from (a TPU VM's `ssh-keys` metadata).
    pub(crate) fn make() -> Result<Injector, String> {
        let dir = tempfile::Builder::new().prefix("theseus-chaos-ssh-").tempdir().map_err(|e| e.to_string())?;
        // The lab's user runs the script and writes its counter and log.
        set_mode(dir.path(), 0o777)?;
        let script = dir.path().join("shell");
        std::fs::write(&script, SCRIPT).map_err(|e| e.to_string())?;
        set_mode(&script, 0o755)?;
        for file in ["count", "log", "lock", "plan"] {
            std::fs::write(dir.path().join(file), "").map_err(|e| e.to_string())?;
            set_mode(&dir.path().join(file), 0o666)?;
        }
        let key = dir.path().join("key");
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "theseus-chaos", "-f"])
            .arg(&key)
            .status()
            .map_err(|e| format!("cannot run ssh-keygen: {e}"))?;
        if !made.success() {
            return Err(format!("ssh-keygen failed ({made})"));
        }
        let public = std::fs::read_to_string(key.with_extension("pub")).map_err(|e| e.to_string())?;
        let mut fields = public.split_whitespace();
        let (Some(kind), Some(blob)) = (fields.next(), fields.next()) else {
            return Err("ssh-keygen wrote no public key".into());
        };
        // One process may install several keys (one per worker): the pid, then which key.
        static INSTALLED: AtomicUsize = AtomicUsize::new(0);
        let line_mark = format!("{MARK}{}-{}", std::process::id(), INSTALLED.fetch_add(1, Ordering::SeqCst));
        let line = format!("command=\"{}\" {kind} {blob} {line_mark}", script.display());
        Ok(Injector { dir, authorized: None, line_mark, line })
    }

    /// The `authorized_keys` line that forces the key's commands through the script.
    pub(crate) fn line(&self) -> &str {
        &self.line
    }

    /// The private key that goes through the script.
    pub(crate) fn key(&self) -> PathBuf {
        self.dir.path().join("key")
    }

    /// Commands seen so far.
    pub(crate) fn count(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("count")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// The command line of command `n` (1-based), shortened, as the step's name.
    pub(crate) fn command(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(i, _)| i.parse() == Ok(n))
            .map(|(_, cmd)| step_name(cmd))
            .unwrap_or_else(|| "?".into())
    }

    /// The whole command line of command `n` (1-based).
    pub(crate) fn full_command(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(i, _)| i.parse() == Ok(n))
            .map(|(_, cmd)| cmd.to_owned())
            .unwrap_or_default()
    }

    /// Fails command `n` (counted from the start) with `fault`.
    pub(crate) fn plan(&self, n: usize, fault: &str) -> Result<(), String> {
        std::fs::write(self.dir.path().join("plan"), format!("{n} {fault}\n")).map_err(|e| e.to_string())
    }

    /// No planned fault.
    pub(crate) fn clear(&self) -> Result<(), String> {
        std::fs::write(self.dir.path().join("plan"), "").map_err(|e| e.to_string())
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        let Some(authorized) = &self.authorized else { return };
        if let Ok(text) = std::fs::read_to_string(authorized) {
            let kept: String =
                text.lines().filter(|l| !l.ends_with(&self.line_mark)).map(|l| format!("{l}\n")).collect();
            let _ = std::fs::write(authorized, kept);
        }
    }
}

/// Lines of chaos runs whose process is gone.
fn remove_stale_lines(authorized: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(authorized).map_err(|e| format!("{}: {e}", authorized.display()))?;
    let alive = |line: &str| match line.rsplit_once(MARK) {
        Some((_, mark)) => Path::new("/proc").join(mark.trim().split('-').next().unwrap_or_default()).exists(),
        None => true,
    };
    let kept: String = text.lines().filter(|l| alive(l)).map(|l| format!("{l}\n")).collect();
    if kept != text {
        std::fs::write(authorized, kept).map_err(|e| format!("{}: {e}", authorized.display()))?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A short name for a remote command of theseus: which step of the flow it is, told by what
/// it runs (the scripts are long; their first words say little).
pub(crate) fn step_name(cmd: &str) -> String {
    let has = |needle: &str| cmd.contains(needle);
    let named = [
        (has("export -p") && has("-l"), "login env"),
        (has("sinfo") || has("nproc") || has("nvidia-smi"), "probe"),
        (has("live()"), "name check"),
        (has("theseus-store") && has("tar -x"), "store upload"),
        (has("theseus-store") && has(".partial"), "materialise+rename"),
        (has("theseus-store"), "store lookup"),
        (has("flock") && has("> \"$run_dir/cancelled\""), "mark+kill"),
        (has("flock") && has("sbatch"), "claim+sbatch"),
        (has("flock"), "claim+launch"),
        (has("scancel"), "scancel"),
        (has("squeue --steps"), "squeue steps"),
        (has("squeue"), "squeue"),
        (has("exists=1"), "read run dir"),
        (has("kill"), "kill"),
        (has("THESEUS_LOCAL_RUN="), "run alive?"),
        (has("printf") && has("\"$HOME\"") && cmd.len() < 60, "home"),
    ];
    if let Some((_, name)) = named.iter().find(|(hit, _)| *hit) {
        return (*name).to_owned();
    }
    let first: Vec<&str> = cmd.split_whitespace().take(2).collect();
    let name = first.join(" ");
    if name.chars().count() > 30 { format!("{}…", name.chars().take(30).collect::<String>()) } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lines_of_dead_chaos_runs_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let authorized = dir.path().join("authorized_keys");
        let ours = format!("command=\"/x\" ssh-ed25519 AAAA {MARK}{}-3", std::process::id());
        let text = format!("ssh-ed25519 AAAA lab\n{ours}\ncommand=\"/y\" ssh-ed25519 BBBB {MARK}4000000000-0\n");
        std::fs::write(&authorized, text).unwrap();
        remove_stale_lines(&authorized).unwrap();
        assert_eq!(std::fs::read_to_string(&authorized).unwrap(), format!("ssh-ed25519 AAAA lab\n{ours}\n"));
    }

    #[test]
    fn step_names_show_what_runs() {
        assert_eq!(step_name("sinfo --Node --noheader"), "probe");
        assert_eq!(step_name("sh -c 'theseus-store: x; tar -x -f - -C \"$tmp\"'"), "store upload");
        assert_eq!(step_name("bash -c 'exec 9>>x; flock -w 120 9; sbatch --parsable'"), "claim+sbatch");
        assert_eq!(step_name("squeue --json --states=all --jobs 37"), "squeue");
        assert_eq!(step_name("sh -c 'flock -w 120 9; date > \"$run_dir/cancelled\"; kill'"), "mark+kill");
        assert_eq!(step_name("echo hello world"), "echo hello");
        assert_eq!(step_name(r#"sh -c 'printf '\''%s'\'' "$HOME"' sh"#), "home");
        assert_eq!(
            step_name(r#"sh -c 'grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ' sh r"#),
            "run alive?"
        );
        assert_eq!(step_name("sh -c 'echo m1; export -p; echo m2\nprintf ... | \"$SHELL\" -l'"), "login env");
        assert!(step_name(&"x".repeat(100)).chars().count() <= 31);
    }
}
