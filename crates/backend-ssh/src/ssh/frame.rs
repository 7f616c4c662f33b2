//! Pure parts of how a command survives the user's login shell: the one line sent over ssh, the
//! marker that frames the command's output, and the login environment captured as data.
//!
//! sshd runs every command as `$SHELL -c LINE`, whatever `$SHELL` is (bash, dash, zsh, tcsh,
//! fish), after the shell's rc files, which may print anything. So [`line()`] is the same for every
//! shell: `/bin/sh -c '<text>'` where the text holds only base64, spaces and `3<&0;|/-` (no
//! newline, `!`, `$`, backslash or quote, which csh and fish read differently). It saves stdin on
//! fd 3 and decodes the real script into a second `/bin/sh`, which reads it from `/dev/stdin`
//! (the pipe), gives stdin back (`exec 0<&3`), prints a random marker on stdout and on stderr,
//! sets the captured login environment (and `SHLVL`, so no `bash` the command starts reads
//! `~/.bashrc` again) and `exec`s the command. Everything before the marker is
//! the rc files' ([`after_marker`]); a marker that never comes is explained in one line
//! ([`no_marker`]).
//!
//! The login environment ([`capture_script`], [`parse_exports`]) is read once per host and
//! connection user: `$SHELL -l` (a login shell of the user's own kind, reading `~/.profile`,
//! `~/.bash_profile`, `~/.login`, fish's login config) runs `/bin/sh -c 'export -p'` after a
//! marker of its own; the variables come back as data, and those it sets differently travel,
//! quoted, at the head of each command's stdin ([`Env::Stdin`]): never on a command line, which
//! other users of the host can read in `ps`. Only a terminal's command carries them inline.

use theseus_core::shell;

/// A fresh marker: 128 random bits, so no rc file can print it by chance.
pub(crate) fn new_marker() -> String {
    format!("theseus-{:032x}", rand::random::<u128>())
}

/// How a command gets the login environment's `export` lines ([`login_prelude`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Env<'a> {
    /// None.
    None,
    /// The first `n` bytes of the command's stdin are the lines (read with `dd bs=1`, which
    /// takes exactly those bytes): their values never appear on a command line, which every
    /// user of the host can read in `ps`.
    Stdin(usize),
    /// In the script itself: for a terminal, whose stdin is the user's.
    Inline(&'a str),
}

/// The command line sent over ssh: `/bin/sh -c '...'` that runs `command` (a POSIX shell
/// command line) after printing `marker` (when given) on stdout and stderr and exporting the
/// login environment `env`.
pub(crate) fn line(command: &str, env: Env<'_>, marker: Option<&str>) -> String {
    let mut script = String::from("exec 0<&3 3<&-\n");
    // bash reads ~/.bashrc when SSH_CLIENT is set, its stdin is a socket and SHLVL says it is the
    // first shell; the login bash that `exec`s /bin/sh puts SHLVL back to 0, so every `bash`
    // a command starts (scripts, the job's supervisor, Slurm's steps that inherit the
    // environment) would print the rc files' banners into its output.
    script.push_str("case ${SHLVL:-0} in ''|0|-*) SHLVL=1 ;; esac; export SHLVL\n");
    if let Some(marker) = marker {
        script.push_str(&format!("printf '%s\\n' {marker}; printf '%s\\n' {marker} >&2\n"));
    }
    match env {
        Env::None | Env::Stdin(0) => {}
        Env::Stdin(n) => script.push_str(&format!(
            "theseus_env=$(dd bs=1 count={n} 2>/dev/null) || exit 125\neval \"$theseus_env\"; unset theseus_env\n"
        )),
        Env::Inline(prelude) => script.push_str(prelude),
    }
    script.push_str("exec ");
    script.push_str(command);
    script.push('\n');
    format!(
        "/bin/sh -c 'exec 3<&0; echo {}|base64 -d|/bin/sh /dev/stdin'",
        theseus_core::encoding::base64(script.as_bytes())
    )
}

/// The bytes after the first `marker` line in `output`, or `None` when there is none.
pub(crate) fn after_marker<'a>(output: &'a [u8], marker: &str) -> Option<&'a [u8]> {
    let needle = format!("{marker}\n");
    let at = output.windows(needle.len()).position(|w| w == needle.as_bytes())?;
    Some(&output[at + needle.len()..])
}

/// The script that prints the environment commands get without a login shell (`export -p` of
/// `/bin/sh`) after `markers[0]`, then `markers[1]`, then the login environment after
/// `markers[2]`: `export -p` of `/bin/sh` started by the user's login shell (`$SHELL -l`, reading
/// the command from stdin, which every shell does: tcsh takes no other flag with `-l`). What the
/// login files print goes with the login shell's stderr, or comes before the marker on stdout.
pub(crate) fn capture_script(markers: [&str; 3]) -> String {
    let [plain, end, login] = markers;
    // The line the login shell reads has no backslash, `$` or double quote: fish and csh read
    // those differently inside single quotes.
    format!(
        "echo {plain}; export -p; echo {end}\n\
         printf '%s\\n' \"/bin/sh -c 'echo {login}; export -p'\" | \"${{SHELL:-/bin/sh}}\" -l 2>/dev/null\n"
    )
}

/// The `export` lines that give a command the login environment, from the output of
/// [`capture_script`]: the variables the login shell sets to another value than the command
/// would have anyway (only those travel with each command), each value quoted.
pub(crate) fn login_prelude(stdout: &[u8], markers: [&str; 3]) -> Result<String, String> {
    let [plain, end, login] = markers;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let after_plain = after_marker(stdout, plain).ok_or("the capture printed no start marker")?;
    let cut = after_marker(after_plain, end).map(|rest| after_plain.len() - rest.len() - end.len() - 1);
    let plain_vars = parse_exports(&text(&after_plain[..cut.ok_or("the capture printed no end marker")?]))?;
    let login_vars = parse_exports(&text(
        after_marker(stdout, login)
            .ok_or("the login shell (`$SHELL -l`) did not run `/bin/sh` (it printed no marker)")?,
    ))?;
    let mut out = String::new();
    for (name, value) in login_vars {
        if !plain_vars.iter().any(|(n, v)| *n == name && *v == value) {
            out.push_str(&format!("export {name}={}\n", shell::quote(&value)));
        }
    }
    Ok(out)
}

/// Variables of a shell that belong to that shell, not to the environment commands should see.
const SHELL_OWN: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_"];

/// Reads `export -p` output (dash: `export NAME='value'`, bash: `export NAME="value"`, a bare
/// `export NAME` for a variable without a value, skipped) back into names and values, without
/// the shell's own variables.
pub(crate) fn parse_exports(text: &str) -> Result<Vec<(String, String)>, String> {
    let words = shell::split(text)?;
    let mut out = Vec::new();
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        if word != "export" {
            return Err(format!("`export -p` printed {word:?} where `export` was expected"));
        }
        while let Some(next) = words.next_if(|w| *w != "export") {
            let Some((name, value)) = next.split_once('=') else { continue };
            if shell::is_env_name(name) && !SHELL_OWN.contains(&name) {
                out.push((name.to_owned(), value.to_owned()));
            }
        }
    }
    Ok(out)
}

/// Why a command's output had no marker, in one line, with the fix; `stderr` is what the login
/// shell printed.
pub(crate) fn no_marker(host: &str, code: Option<i32>, stderr: &str) -> String {
    let last = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let said = if last.is_empty() { String::new() } else { format!(" (it said: {last})") };
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("base64") && (lower.contains("not found") || lower.contains("no such file")) {
        return format!(
            "`{host}` has no `base64`, which theseus needs to run commands there{said}; install coreutils (or busybox) on it"
        );
    }
    if lower.contains("/bin/sh") && (lower.contains("not found") || lower.contains("no such file")) || code == Some(127)
    {
        return format!(
            "`{host}` cannot run `/bin/sh`, which theseus runs every command with{said}; a POSIX /bin/sh must exist there"
        );
    }
    let code = code.map_or("a signal".to_owned(), |c| format!("exit code {c}"));
    format!(
        "the command on `{host}` ended ({code}) before it started{said}: is your shell clean? The login shell's rc files \
         (~/.bashrc, ~/.profile, ~/.cshrc, config.fish) must not exit, exec another program or read stdin when \
         `ssh {host} true` runs"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_has_nothing_a_csh_or_fish_would_read_differently() {
        let command = "sh -c 'echo \"$1\" `id` !x \\\\ \n second line' sh 'it'\\''s'";
        let line = line(command, Env::Inline("export PATH='/a b'\n"), Some("theseus-1"));
        let inner = line.strip_prefix("/bin/sh -c '").and_then(|l| l.strip_suffix('\'')).unwrap();
        assert!(
            inner.chars().all(|c| c.is_ascii_alphanumeric() || " +/=<&;|-".contains(c)),
            "unsafe character in {inner:?}"
        );
    }

    /// The line run by every login shell the lab installs (`ci/lab/lib.sh`), here, as sshd runs
    /// it (`SHELL -c LINE`): the same words, stdin and output in each.
    #[test]
    fn every_shell_runs_the_line_alike() {
        let script = "echo \"args: $1|$2|$THESEUS_FRAME_TEST\"; cat; echo \"it's \\$HOME !x `echo b`\"";
        let command = shell::join(["sh", "-c", script, "sh", "a  b", "c$d'e"]);
        let prelude = "export THESEUS_FRAME_TEST='x y'\n";
        let line = line(&command, Env::Stdin(prelude.len()), Some("theseus-m"));
        for sh in ["/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/zsh", "/usr/bin/tcsh", "/bin/csh", "/usr/bin/fish"] {
            if !std::path::Path::new(sh).exists() {
                eprintln!("NOT RUN for {sh}: not installed (the lab installs it: cargo xtask lab up)");
                assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "{sh} is missing");
                continue;
            }
            let mut child = std::process::Command::new(sh)
                .args(["-c", &line])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdin = format!("{prelude}stdin\n");
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(stdout, "theseus-m\nargs: a  b|c$d'e|x y\nstdin\nit's $HOME !x b\n", "{sh}");
            assert_eq!(String::from_utf8_lossy(&out.stderr), "theseus-m\n", "{sh}");
        }
    }

    #[test]
    fn output_starts_after_the_marker() {
        assert_eq!(after_marker(b"banner\nM\nout\n", "M"), Some(&b"out\n"[..]));
        assert_eq!(after_marker(b"no newline bannerM\nout", "M"), Some(&b"out"[..]));
        assert_eq!(after_marker(b"M\n", "M"), Some(&b""[..]));
        assert_eq!(after_marker(b"banner\n", "M"), None);
    }

    #[test]
    fn exports_are_read_back() {
        let dash = "export HOME='/home/u'\nexport PWD='/home/u'\nexport ODD='it'\"'\"'s\nmulti'\nexport EMPTY=''\n\
                    export UNSET\nexport SHLVL='1'\n";
        let vars = parse_exports(dash).unwrap();
        let expected = [("HOME", "/home/u"), ("ODD", "it's\nmulti"), ("EMPTY", "")];
        assert_eq!(vars, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
        let bash = "export Q=\"a \\\"b\\\" \\$c\"\n";
        assert_eq!(parse_exports(bash).unwrap(), [("Q".to_owned(), "a \"b\" $c".to_owned())]);
        assert!(parse_exports("==== banner ====").is_err());
    }

    #[test]
    fn only_what_the_login_shell_changes_travels_quoted() {
        let m = ["m1", "m2", "m3"];
        let out = "bashrc banner\nm1\nexport HOME='/h'\nexport PATH='/usr/bin'\nm2\nprofile banner\nm3\n\
                   export HOME='/h'\nexport PATH='/site/bin:/usr/bin'\nexport MOD='it'\"'\"'s'\n";
        assert_eq!(
            login_prelude(out.as_bytes(), m).unwrap(),
            "export PATH=/site/bin:/usr/bin\nexport MOD='it'\\''s'\n"
        );
        let err = login_prelude(b"m1\nexport A='b'\nm2\nfish: unknown command\n", m).unwrap_err();
        assert!(err.contains("`$SHELL -l`"), "{err}");
    }

    #[test]
    fn a_missing_marker_is_explained_in_one_line() {
        let base = no_marker("box", Some(0), "bashrc noise\nsh: 1: base64: not found\n");
        assert!(base.contains("no `base64`") && base.contains("install coreutils"), "{base}");
        let sh = no_marker("box", Some(127), "tcsh: /bin/sh: Command not found.\n");
        assert!(sh.contains("cannot run `/bin/sh`"), "{sh}");
        let unclean = no_marker("box", Some(0), "welcome\n");
        assert!(unclean.contains("is your shell clean?") && unclean.contains("it said: welcome"), "{unclean}");
        for text in [base, sh, unclean] {
            assert!(!text.contains('\n'), "{text}");
        }
    }
}
