//! Pure: how a case is judged, and the report.

use std::fmt;

/// Whether step `i` of `names` repeats a round of a wait loop: it and the step before it are
/// the two steps before them again (`squeue | squeue steps | squeue | squeue steps` while a
/// cancel waits for Slurm). A fault there meets the client at the same point of its loop as in
/// the first round, so the short matrix faults only the first round; `--full` faults every one.
pub(crate) fn repeats_a_poll(names: &[String], i: usize) -> bool {
    i >= 3 && i < names.len() && names[i] == names[i - 2] && names[i - 1] == names[i - 3]
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The command succeeded.
    Ok,
    /// It failed with one clear `error:` line.
    ClearError,
    /// It failed without one clear sentence (none, several, raw log lines, escape codes).
    Unclear(String),
    /// It did not end within the case's bound.
    Hang,
    /// It panicked.
    Panic(String),
}

/// One case of the matrix.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) flow: &'static str,
    /// What the failed step does (the request or remote command of the clean run).
    pub(crate) step: String,
    /// The request that failed (1-based), of `of`.
    pub(crate) n: usize,
    pub(crate) of: usize,
    pub(crate) fault: String,
    pub(crate) verdict: Verdict,
    /// What was left behind.
    pub(crate) left: Vec<String>,
    pub(crate) seconds: f64,
}

impl Case {
    /// Whether the case fails the matrix.
    pub(crate) fn is_bad(&self) -> bool {
        !self.left.is_empty() || !matches!(self.verdict, Verdict::Ok | Verdict::ClearError)
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} step {}/{} ({}) {}: ", self.flow, self.n, self.of, self.step, self.fault)?;
        match &self.verdict {
            Verdict::Ok => write!(f, "succeeded")?,
            Verdict::ClearError => write!(f, "clear error")?,
            Verdict::Unclear(why) => write!(f, "unclear error: {why}")?,
            Verdict::Hang => write!(f, "hang")?,
            Verdict::Panic(line) => write!(f, "panic: {line}")?,
        }
        if !self.left.is_empty() {
            write!(f, "; left behind: {}", self.left.join(", "))?;
        }
        write!(f, " ({:.1}s)", self.seconds)
    }
}

/// Judges a finished (or killed) command by its exit code and stderr.
pub(crate) fn classify(code: Option<i32>, stderr: &str, timed_out: bool) -> Verdict {
    if timed_out {
        return Verdict::Hang;
    }
    if let Some(line) = stderr.lines().find(|l| l.contains("panicked at")) {
        return Verdict::Panic(line.trim().to_owned());
    }
    if code == Some(0) {
        return Verdict::Ok;
    }
    if stderr.contains('\u{1b}') {
        return Verdict::Unclear("ANSI escape codes on stderr".into());
    }
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    // A raw tracing line: `2026-11-25T05:00:00.000Z  WARN theseus...`.
    if let Some(raw) = stderr
        .lines()
        .find(|l| l.len() > 20 && l.as_bytes()[4] == b'-' && l.contains(" WARN ") || l.contains(" ERROR "))
    {
        return Verdict::Unclear(format!("a raw log line: {raw}"));
    }
    match errors.as_slice() {
        [one] if one.len() > "error: ".len() + 10 => Verdict::ClearError,
        [] => Verdict::Unclear(format!("exit {code:?} without an `error:` line: {}", last_line(stderr))),
        [one] => Verdict::Unclear(format!("a bare error: {one}")),
        many => Verdict::Unclear(format!("{} `error:` lines", many.len())),
    }
}

fn last_line(text: &str) -> String {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(nothing on stderr)").to_owned()
}

/// The cases that fail the matrix.
pub(crate) fn bad(cases: &[Case]) -> Vec<&Case> {
    cases.iter().filter(|c| c.is_bad()).collect()
}

/// One row per flow: cases, faults, outcomes, cases that left something behind.
pub(crate) fn table(backend: &str, cases: &[Case]) -> String {
    let mut out = format!(
        "{backend}\n{:<8} {:>6} {:>9} {:>6} {:>8} {:>8} {:>6} {:>6} {:>6}  {}\n",
        "flow", "steps", "cases", "ok", "errors", "unclear", "hangs", "panics", "left", "faults"
    );
    let mut flows: Vec<&str> = cases.iter().map(|c| c.flow).collect();
    flows.dedup();
    for flow in flows {
        let of: Vec<&Case> = cases.iter().filter(|c| c.flow == flow).collect();
        let count = |p: &dyn Fn(&Case) -> bool| of.iter().filter(|c| p(c)).count();
        let mut faults: Vec<&str> = Vec::new();
        for case in &of {
            if !faults.contains(&case.fault.as_str()) {
                faults.push(&case.fault);
            }
        }
        out.push_str(&format!(
            "{:<8} {:>6} {:>9} {:>6} {:>8} {:>8} {:>6} {:>6} {:>6}  {}\n",
            flow,
            of.first().map_or(0, |c| c.of),
            of.len(),
            count(&|c| c.verdict == Verdict::Ok),
            count(&|c| c.verdict == Verdict::ClearError),
            count(&|c| matches!(c.verdict, Verdict::Unclear(_))),
            count(&|c| c.verdict == Verdict::Hang),
            count(&|c| matches!(c.verdict, Verdict::Panic(_))),
            count(&|c| !c.left.is_empty()),
            faults.join(", "),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_rounds_after_the_first_of_a_wait_loop_repeat_it() {
        let names: Vec<String> =
            "squeue scancel squeue steps squeue steps squeue steps read steps".split(' ').map(str::to_owned).collect();
        let repeated: Vec<usize> = (0..names.len()).filter(|&i| super::repeats_a_poll(&names, i)).collect();
        assert_eq!(repeated, [5, 6, 7]);
        // Two uploads in a row are two uploads, not a loop; nor is a read before and after a kill.
        let names: Vec<String> = "probe upload upload claim read kill read".split(' ').map(str::to_owned).collect();
        assert!((0..names.len()).all(|i| !super::repeats_a_poll(&names, i)));
    }

    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(classify(Some(0), "theseus: submitted\n", false), Verdict::Ok);
        assert_eq!(classify(None, "", true), Verdict::Hang);
        assert_eq!(
            classify(Some(2), "error: volcano(k8s): failed to create the vcjob: 500 injected\n  caused by: x\n", false),
            Verdict::ClearError
        );
        assert!(matches!(classify(Some(101), "thread 'main' panicked at src/x.rs:1:1:\n", false), Verdict::Panic(_)));
        assert!(matches!(classify(Some(2), "something went wrong\n", false), Verdict::Unclear(_)));
        assert!(matches!(classify(Some(2), "error: a\nerror: b\n", false), Verdict::Unclear(_)));
        assert!(matches!(classify(Some(2), "\u{1b}[31merror: red text that is long\n", false), Verdict::Unclear(_)));
        assert!(matches!(
            classify(
                Some(2),
                "2026-11-25T05:00:00.000Z  WARN kube_client: boom\nerror: it failed clearly enough\n",
                false
            ),
            Verdict::Unclear(_)
        ));
    }

    #[test]
    fn the_table_counts_per_flow_and_bad_cases_are_listed() {
        let case = |flow, verdict, left: &[&str]| Case {
            flow,
            step: "POST jobs".into(),
            n: 1,
            of: 3,
            fault: "500".into(),
            verdict,
            left: left.iter().map(|s| (*s).to_owned()).collect(),
            seconds: 0.1,
        };
        let cases = vec![
            case("submit", Verdict::Ok, &[]),
            case("submit", Verdict::ClearError, &["helper job h"]),
            case("cancel", Verdict::Hang, &[]),
        ];
        let table = table("volcano", &cases);
        assert!(
            table.contains("submit        3         2      1        1        0      0      0      1  500"),
            "{table}"
        );
        assert_eq!(bad(&cases).len(), 2);
        assert!(bad(&cases)[0].to_string().contains("left behind: helper job h"));
    }
}
