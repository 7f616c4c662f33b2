//! The `.env` file of the current directory, read as python-dotenv's `load_dotenv()` reads it
//! (the original CLI called it at start): `KEY=VALUE` lines, an optional `export ` prefix,
//! single quotes (literal), double quotes (escapes), unquoted values ending at ` #`, `${VAR}` and
//! `${VAR:-default}` in unquoted and double-quoted values, comments and blank lines. A variable
//! already set in the environment is never replaced; a line that cannot be read is a warning
//! naming `FILE:LINE` (never its value), and the rest of the file still counts.
//!
//! The variables are for this process and what it starts (credentials such as `KUBECONFIG` or
//! `GOOGLE_APPLICATION_CREDENTIALS`, proxies, `THESEUSCFG_*` config layers, `RUST_LOG`); a job
//! gets none of them unless asked (`--env KEY=VALUE`, or `--secret-env KEY`, which forwards
//! the value the `.env` gave without writing it anywhere). Unsafe code is forbidden in this
//! workspace, and changing the environment of a running process is unsafe: when the file adds
//! variables, [`load`] executes this same program again with them added (once: the new process
//! finds them all set, and [`DONE`] names the file it already read).

use std::collections::BTreeMap;
use std::path::Path;

/// Set (to the file's path) in the environment of the process that [`load`] starts anew.
const DONE: &str = "THESEUS_DOTENV_LOADED";

/// What a `.env` file says: the variables in order, and the lines that could not be read
/// (1-based line number and why, without the value).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) vars: Vec<(String, String)>,
    pub(crate) problems: Vec<(usize, String)>,
}

/// Reads `./.env` (if there is one) and, when it sets variables the environment lacks, runs
/// this program again with them (this call then does not return). Warnings go to stderr.
pub(crate) fn load() {
    let path = Path::new(".env");
    let Ok(text) = std::fs::read_to_string(path) else { return };
    let shown = std::env::current_dir().map(|d| d.join(".env")).unwrap_or_else(|_| path.to_owned());
    if std::env::var_os(DONE).is_some_and(|v| v == shown.as_os_str()) {
        return;
    }
    let parsed = parse(&text, &|name| std::env::var(name).ok());
    for (line, why) in &parsed.problems {
        eprintln!("theseus: warning: {}:{line}: {why}; the line is ignored", shown.display());
    }
    let missing: Vec<&(String, String)> =
        parsed.vars.iter().filter(|(name, _)| std::env::var_os(name).is_none()).collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("theseus: warning: {}: cannot find this program to load it; the file is ignored", shown.display());
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg0(arg0).args(args).env(DONE, &shown);
    for (name, value) in missing {
        cmd.env(name, value);
    }
    use std::os::unix::process::CommandExt as _;
    let e = cmd.exec();
    eprintln!(
        "theseus: warning: {}: cannot run this program again with its variables ({e}); the file is ignored",
        shown.display()
    );
}

/// Parses the text of a `.env` file; `${VAR}` is looked up in `env` first (the process
/// environment wins, as it does for the variables themselves), then among the file's earlier
/// variables.
pub(crate) fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Parsed {
    let mut out = Parsed::default();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let number = i + 1;
        let line = lines[i].trim_end_matches('\r');
        i += 1;
        let stmt = line.trim_start();
        if stmt.is_empty() || stmt.starts_with('#') {
            continue;
        }
        let stmt = stmt.strip_prefix("export ").map(str::trim_start).unwrap_or(stmt);
        let Some((key, rest)) = stmt.split_once('=') else {
            // `KEY` alone sets nothing (python-dotenv gives it no value).
            if is_name(stmt.trim_end()) {
                continue;
            }
            out.problems.push((number, "not `KEY=VALUE`".into()));
            continue;
        };
        let key = key.trim();
        if !is_name(key) {
            out.problems.push((number, "the name is not letters, digits and `_` (not starting with a digit)".into()));
            continue;
        }
        let rest = rest.trim_start();
        let lookup = |name: &str| env(name).or_else(|| seen.get(name).cloned());
        let value = match rest.chars().next() {
            Some(q @ ('\'' | '"')) => {
                // A quoted value may span lines, up to its closing quote.
                let mut body = rest[1..].to_owned();
                let next = i;
                let mut end = closing(&body, q);
                while end.is_none() && i < lines.len() {
                    body.push('\n');
                    body.push_str(lines[i].trim_end_matches('\r'));
                    i += 1;
                    end = closing(&body, q);
                }
                let Some(end) = end else {
                    // As python-dotenv, reading goes on at the next line.
                    out.problems.push((number, format!("the value's {q} quote is never closed")));
                    i = next;
                    continue;
                };
                let after = body[end + 1..].trim_start();
                if !(after.is_empty() || after.starts_with('#')) {
                    out.problems.push((number, "text after the closing quote".into()));
                    continue;
                }
                let inner = &body[..end];
                if q == '\'' { unescape_single(inner) } else { interpolate(&unescape_double(inner), &lookup) }
            }
            _ => {
                // A comment starts at a `#` after white space (`A=#x` is `#x`, as python-dotenv has it).
                let value = match rest.find(" #").or_else(|| rest.find("\t#")) {
                    Some(at) => &rest[..at],
                    None => rest,
                };
                interpolate(value.trim_end(), &lookup)
            }
        };
        if value.contains('\0') {
            out.problems.push((number, "the value holds a NUL character".into()));
            continue;
        }
        seen.insert(key.to_owned(), value.clone());
        out.vars.retain(|(k, _)| k != key);
        out.vars.push((key.to_owned(), value));
    }
    out
}

/// An environment variable name.
fn is_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Index of the quote `q` that closes `body` (a backslash escapes the next character).
fn closing(body: &str, q: char) -> Option<usize> {
    let mut escaped = false;
    for (at, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == q => return Some(at),
            _ => {}
        }
    }
    None
}

/// A single-quoted value: literal but for `\'` and `\\`.
fn unescape_single(s: &str) -> String {
    s.replace("\\\\", "\u{0}").replace("\\'", "'").replace('\u{0}', "\\")
}

/// A double-quoted value: `\n`, `\t`, `\r`, `\"`, `\\`, `\'`, `\$` (others stay as written).
fn unescape_double(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(c @ ('"' | '\\' | '\'')) => out.push(c),
            // `\$` keeps a literal `$` from interpolation (marked, restored after it).
            Some('$') => out.push('\u{1}'),
            Some(c) => {
                out.push('\\');
                out.push(c);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// `${NAME}` and `${NAME:-default}` replaced (unset: empty, or the default).
fn interpolate(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let (name, default) = match after[..end].split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (&after[..end], None),
        };
        if is_name(name) {
            match lookup(name).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(&v),
                None => out.push_str(default.unwrap_or("")),
            }
        } else {
            out.push_str(&rest[at..at + 3 + end]);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out.replace('\u{1}', "$")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Vec<(String, String)> {
        let parsed = parse(text, &|n| (n == "HOME").then(|| "/home/u".to_owned()));
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        parsed.vars
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_forms_python_dotenv_reads() {
        let text = "# a comment\n\nA=1\nexport B = two words  # comment\nC='single $HOME \\' x'\n\
                    D=\"double\\n${HOME} \\\"q\\\" \\$HOME\"\nE=\nF=#not a comment\nG=a#b\n\
                    H=\"multi\nline\" # c\nI=${A}-${NOPE:-dflt}-${NOPE}\nJ='${HOME}'\r\nLONE\n";
        assert_eq!(
            vars(text),
            pairs(&[
                ("A", "1"),
                ("B", "two words"),
                ("C", "single $HOME ' x"),
                ("D", "double\n/home/u \"q\" $HOME"),
                ("E", ""),
                ("F", "#not a comment"),
                ("G", "a#b"),
                ("H", "multi\nline"),
                ("I", "1-dflt-"),
                ("J", "${HOME}"),
            ])
        );
    }

    #[test]
    fn a_later_line_wins_and_the_environment_wins_in_interpolation() {
        assert_eq!(vars("A=1\nA=2\nB=${A}\nC=${HOME}"), pairs(&[("A", "2"), ("B", "2"), ("C", "/home/u")]));
    }

    #[test]
    fn bad_lines_are_named_by_number_without_their_value_and_the_rest_counts() {
        let parsed = parse("OK=1\nnot a line\n1BAD=x\nQ='open\nR=2\nS=\"x\" trailing\n", &|_| None);
        assert_eq!(parsed.vars, pairs(&[("OK", "1"), ("R", "2")]));
        let numbers: Vec<usize> = parsed.problems.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, vec![2, 3, 4, 6]);
        assert!(
            parsed.problems.iter().all(|(_, why)| !why.contains("open") && !why.contains("trailing")),
            "{parsed:?}"
        );
        assert!(parsed.problems[2].1.contains("never closed"));
    }
}
