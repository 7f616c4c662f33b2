//! The run's paths in the bootstrap: exported as rendered (what `env.sh` gives `theseus shell`),
//! then, in `bootstrap.sh` only, resolved again at run time by `paths.sh` with the
//! `THESEUS_DISPATCH_*_OVERRIDE` variables of the job's environment (see that file), which win
//! over the rendered paths in every job the bootstrap runs.
//!
//! For the overrides the rendered dirs are split into a base and a relative part: the work dir
//! into the cluster's work root and `<project>/<group>/<name>[/<run>]`, the status dir into the
//! status root and `<project>/<group>/<name>/<run>`, the log file into the log dir; a dir laid
//! out otherwise is split at its last component.

use std::fmt::Write as _;

use super::BootstrapInput;
use crate::shell::quote;

/// The root of a bootstrap made without one (`theseus bootstrap` without `--root`): the script
/// then demands `--root` (or `THESEUS_DISPATCH_ROOT_OVERRIDE`) at run time, and every dir under
/// this root moves under the one given.
pub const RUNTIME_ROOT: &str = "/__THESEUS_RUNTIME_ROOT__";

/// A directory without trailing slashes (but `/` stays `/`).
pub(super) fn trim_dir(dir: &str) -> &str {
    let trimmed = dir.trim_end_matches('/');
    if trimmed.is_empty() && !dir.is_empty() { "/" } else { trimmed }
}

/// Appends `export NAME=<quoted value>`.
pub(super) fn export(s: &mut String, name: &str, value: &str) {
    let _ = writeln!(s, "export {name}={}", quote(value));
}

/// The static part (bash).
pub const PATHS: &str = include_str!("paths.sh");

/// The plain exports of the rendered paths (both `bootstrap.sh` and `env.sh`).
pub(super) fn render_exports(s: &mut String, input: &BootstrapInput) {
    let work_dir = trim_dir(&input.work_dir);
    let (status, _) = split(trim_dir(&input.run_dir), &[input.identity.run_path()]);
    export(s, "THESEUS_WORK_DIR", work_dir);
    export(s, "THESEUS_RUN_DIR", trim_dir(&input.run_dir));
    export(s, "THESEUS_STATUS_DIR", &status);
    if let Some(log) = &input.log_dir {
        export(s, "THESEUS_LOG_DIR", trim_dir(log));
    }
    export(s, "THESEUS_ROOT", &input.root_dir);
    export(s, "THESEUS_DATA_DIR", trim_dir(&input.data_dirs.data));
    export(s, "THESEUS_CHECKPOINTS_DIR", trim_dir(&input.data_dirs.checkpoints));
    export(s, "THESEUS_RESULTS_DIR", trim_dir(&input.data_dirs.results));
    export(s, "THESEUS_CHECKPOINT_DIR", &input.checkpoint_dir());
    export(s, "THESEUS_CONFIG", &format!("{}/{}/config.json", work_dir.trim_end_matches('/'), super::BOOTSTRAP_DIR));
}

/// `env.sh`'s last line: the paths the bootstrap resolved, when overrides moved them.
pub(super) fn render_env_file_tail(s: &mut String) {
    let _ = writeln!(s, "if [ -f ./{0}/paths.sh ]; then . ./{0}/paths.sh; fi", super::BOOTSTRAP_DIR);
}

/// The rendered paths' plain exports and the values `paths.sh` reads, for a script that
/// resolves the paths itself (`theseus bootstrap`'s, before it extracts the code).
pub fn render_path_values(s: &mut String, input: &BootstrapInput) {
    render_exports(s, input);
    render_values(s, input);
}

/// The values `paths.sh` reads.
fn render_values(s: &mut String, input: &BootstrapInput) {
    let id = &input.identity;
    let job_rel = format!("{}/{}/{}", id.project, id.group, id.name);
    let (work, work_rel) = split(trim_dir(&input.work_dir), &[id.run_path(), job_rel.clone()]);
    let (status, run_rel) = split(trim_dir(&input.run_dir), &[id.run_path()]);
    let root = trim_dir(&input.root_dir);
    let mut value = |name: &str, v: &str| {
        let _ = writeln!(s, "theseus_paths_{name}={}", quote(v));
    };
    value("root", root);
    value("require_root", if root == RUNTIME_ROOT { "1" } else { "0" });
    value("work", &work);
    value("work_rel", &work_rel);
    value("work_rendered", trim_dir(&input.work_dir));
    value("status", &status);
    value("run_rel", &run_rel);
    value("run_rendered", trim_dir(&input.run_dir));
    value("log", input.log_dir.as_deref().map(trim_dir).unwrap_or(""));
    value("job_rel", &job_rel);
}

/// The values `paths.sh` reads, then `paths.sh` and its call (`bootstrap.sh` only, after the
/// plain exports).
pub(super) fn render_resolution(s: &mut String, input: &BootstrapInput) {
    render_values(s, input);
    s.push_str(PATHS);
    // A work dir moved by an override must hold this job's code (the same storage seen at
    // another path): else the job would run nothing, or another job's code.
    s.push_str(
        "theseus_resolve_paths\n\
         if [[ \"$THESEUS_WORK_DIR\" != \"$theseus_paths_work_rendered\" && ! -f \"$THESEUS_WORK_DIR/.theseus/bootstrap.sh\" ]]; then\n  \
           theseus_die \"the overrides (${theseus_paths_overridden# }) put the work dir at $THESEUS_WORK_DIR, which does not hold this job's code (it is at $theseus_paths_work_rendered)\"\n\
         fi\n\
         theseus_paths_env\n",
    );
}

/// `dir` as (base, relative part): the first of `rels` it ends with (`base/rel`), else its
/// parent and last component.
fn split(dir: &str, rels: &[String]) -> (String, String) {
    for rel in rels {
        if let Some(base) = dir.strip_suffix(rel.as_str()).and_then(|b| b.strip_suffix('/')) {
            return (if base.is_empty() { "/".to_owned() } else { base.to_owned() }, rel.clone());
        }
    }
    match dir.rsplit_once('/') {
        Some(("", last)) => ("/".to_owned(), last.to_owned()),
        Some((base, last)) => (base.to_owned(), last.to_owned()),
        None => (dir.to_owned(), String::new()),
    }
}

/// The log dir of a run whose log file is `log_file`: without `/<project>/<group>/<name>/<run>.log`,
/// else the file's dir.
pub(super) fn log_dir(log_file: &str, identity: &crate::job::JobIdentity) -> String {
    let (base, _) = split(log_file, &[format!("{}.log", identity.run_path())]);
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_split_at_the_runs_relative_dir_else_at_the_last_component() {
        let rels = ["p/g/n/r".to_owned(), "p/g/n".to_owned()];
        assert_eq!(split("/w/p/g/n/r", &rels), ("/w".into(), "p/g/n/r".into()));
        assert_eq!(split("/w x/p/g/n", &rels), ("/w x".into(), "p/g/n".into()));
        assert_eq!(split("/p/g/n/r", &rels), ("/".into(), "p/g/n/r".into()));
        assert_eq!(split("/w/xp/g/n/r", &rels), ("/w/xp/g/n".into(), "r".into()));
        assert_eq!(split("/status/run", &rels), ("/status".into(), "run".into()));
        assert_eq!(split("/run", &rels), ("/".into(), "run".into()));
    }
}
