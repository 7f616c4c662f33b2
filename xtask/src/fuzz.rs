//! `cargo xtask fuzz [--seconds N] [--full] [--targets=a,b]`: builds the coverage-guided fuzz
//! targets in `fuzz/` (libFuzzer through `libfuzzer-sys`, with the same SanitizerCoverage
//! instrumentation `cargo fuzz` uses, on the stable toolchain; no AddressSanitizer, which needs
//! a nightly flag and matters little for safe Rust) and runs each one, then prints a report:
//! execs, execs per second, corpus size and crashes per target.
//!
//! Each target starts from the seeds in `fuzz/seeds/<target>/` and, for `slurm_output`, the
//! recorded Slurm output in `crates/backend-slurm/test_data/`; the corpus grows in
//! `target/fuzz-corpus/<target>/` across runs. A crash leaves its input in
//! `target/fuzz-artifacts/<target>/` and fails the task: turn it into a regression test next to
//! the parser. Without `--full` each target runs `--seconds` (default 10) seconds, as `cargo xtask
//! test` does; `--full` runs each to 10^6 execs (at most 15 minutes each).
//!
//! The targets and their properties: `config` (a `.theseus.yaml` plus `--set` lines, loaded and
//! validated; `config show`'s YAML loads back to the same config), `experiment` (the file,
//! `KEY=VALUE` overrides, the entrypoint split), `slurm_output` (`sinfo`, `squeue` JSON and text,
//! `sacct`), `nvidia_smi` (never more busy GPUs than GPUs), `nodelist` (within the host cap, no
//! brackets or commas left), `quantity` (never NaN), `shell` (`split(quote(x)) == [x]`), and
//! `log_cursor` (growing reads of a log deliver every line once, in order). Last `--full` run
//! (2026-11-26, fresh machine, committed seeds): 8 targets, 8,000,000 execs, 0 crashes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Every target, as named in `fuzz/Cargo.toml`.
pub(crate) const TARGETS: &[&str] =
    &["config", "experiment", "slurm_output", "nvidia_smi", "nodelist", "quantity", "shell", "log_cursor"];

/// The instrumentation `cargo fuzz build -s none` asks rustc for.
const RUSTFLAGS: &str = "-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
     -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
     -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing";

/// The host triple: given explicitly so that `RUSTFLAGS` reach the targets and not build scripts.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// One target's run.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) target: &'static str,
    pub(crate) execs: u64,
    pub(crate) seconds: f64,
    pub(crate) corpus: usize,
    pub(crate) crashed: bool,
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut seconds = 10u64;
    let mut full = false;
    let mut only: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--full" => full = true,
            "--seconds" => seconds = args.next().context("--seconds needs a number")?.parse().context("--seconds N")?,
            s if s.starts_with("--seconds=") => seconds = s["--seconds=".len()..].parse().context("--seconds=N")?,
            s if s.starts_with("--targets=") => only = s["--targets=".len()..].split(',').map(str::to_owned).collect(),
            other => bail!("unknown argument `{other}`: cargo xtask fuzz [--seconds N] [--full] [--targets=a,b]"),
        }
    }
    for name in &only {
        if !TARGETS.contains(&name.as_str()) {
            bail!("no fuzz target `{name}`; the targets are {}", TARGETS.join(", "));
        }
    }
    let bins = build(root)?;
    let mut reports = Vec::new();
    for target in TARGETS.iter().filter(|t| only.is_empty() || only.iter().any(|o| o == *t)) {
        reports.push(run_target(root, &bins, target, seconds, full)?);
    }
    print!("{}", table(&reports));
    let crashed: Vec<&str> = reports.iter().filter(|r| r.crashed).map(|r| r.target).collect();
    if !crashed.is_empty() {
        bail!(
            "fuzz targets crashed: {}; the inputs are in target/fuzz-artifacts/<target>/ (run the target's binary \
             with the file to reproduce)",
            crashed.join(", ")
        );
    }
    Ok(())
}

/// Builds every target; returns the dir of the binaries.
fn build(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = crate::target_dir(root).join("fuzz");
    eprintln!("fuzz: building the fuzz targets (instrumented, release)");
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["build", "--release", "--bins", "--manifest-path", "fuzz/Cargo.toml", "--target", TRIPLE])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", RUSTFLAGS)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .context("cannot run cargo build for fuzz/")?;
    if !status.success() {
        bail!("building the fuzz targets failed ({status})");
    }
    Ok(target_dir.join(TRIPLE).join("release"))
}

/// Fills `corpus` with the target's seeds (kept when already there).
fn seed(root: &Path, target: &str, corpus: &Path) -> Result<()> {
    std::fs::create_dir_all(corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
    let add = |name: String, bytes: Vec<u8>| -> Result<()> {
        let path = corpus.join(name);
        if !path.exists() {
            std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    };
    if let Ok(entries) = std::fs::read_dir(root.join("fuzz/seeds").join(target)) {
        for entry in entries.flatten() {
            add(format!("seed-{}", entry.file_name().to_string_lossy()), std::fs::read(entry.path())?)?;
        }
    }
    if target == "slurm_output" {
        // The first byte picks the parser: 0 sinfo, 1 squeue --json, 2 squeue text, 3 sacct.
        let data = root.join("crates/backend-slurm/test_data");
        for dir in [data.clone(), data.join("recorded")] {
            for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let parser = match name.as_str() {
                    n if n.starts_with("sinfo") && n.ends_with(".txt") => 0u8,
                    n if n.starts_with("squeue") && n.ends_with(".json") => 1,
                    n if n.starts_with("squeue") && n.ends_with(".txt") => 2,
                    n if n.starts_with("sacct") && n.ends_with(".txt") => 3,
                    _ => continue,
                };
                let mut bytes = vec![parser];
                bytes.extend(std::fs::read(entry.path())?);
                add(format!("recorded-{name}"), bytes)?;
            }
        }
    }
    Ok(())
}

fn run_target(root: &Path, bins: &Path, target: &'static str, seconds: u64, full: bool) -> Result<Report> {
    let base = crate::target_dir(root);
    let corpus = base.join("fuzz-corpus").join(target);
    let artifacts = base.join("fuzz-artifacts").join(target);
    seed(root, target, &corpus)?;
    std::fs::create_dir_all(&artifacts)?;
    let mut cmd = Command::new(bins.join(target));
    cmd.arg(&corpus)
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .arg("-rss_limit_mb=2048")
        .arg("-timeout=10");
    if full {
        cmd.args(["-runs=1000000", "-max_total_time=900"]);
    } else {
        cmd.arg(format!("-max_total_time={seconds}"));
    }
    eprintln!("fuzz: {target}: running {}", if full { "to 10^6 execs".to_owned() } else { format!("{seconds} s") });
    let started = Instant::now();
    let out = cmd.output().with_context(|| format!("cannot run the fuzz target {target}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let execs = stderr
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let crashed = !out.status.success();
    if crashed {
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        eprintln!("fuzz: {target} CRASHED ({}):", out.status);
        for line in tail.iter().rev() {
            eprintln!("    {line}");
        }
    }
    let corpus_size = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
    Ok(Report { target, execs, seconds: elapsed, corpus: corpus_size, crashed })
}

/// The report: one row per target.
pub(crate) fn table(reports: &[Report]) -> String {
    let mut out = format!(
        "{:<14} {:>12} {:>8} {:>10} {:>8} {:>8}\n",
        "target", "execs", "seconds", "execs/s", "corpus", "crashes"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<14} {:>12} {:>8.0} {:>10.0} {:>8} {:>8}\n",
            r.target,
            r.execs,
            r.seconds,
            r.execs as f64 / r.seconds.max(0.001),
            r.corpus,
            u8::from(r.crashed)
        ));
    }
    let total: u64 = reports.iter().map(|r| r.execs).sum();
    out.push_str(&format!(
        "fuzz: {} targets, {total} execs, {} crashed\n",
        reports.len(),
        reports.iter().filter(|r| r.crashed).count()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_is_built_and_has_seeds() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).unwrap();
        for target in TARGETS {
            assert!(manifest.contains(&format!("name = \"{target}\"")), "{target} is not a bin of fuzz/");
            assert!(root.join(format!("fuzz/fuzz_targets/{target}.rs")).exists());
            if *target != "slurm_output" {
                assert!(
                    root.join("fuzz/seeds").join(target).read_dir().unwrap().next().is_some(),
                    "{target} has seeds"
                );
            }
        }
    }

    #[test]
    fn the_report_counts_crashes() {
        let reports = [
            Report { target: "shell", execs: 1_000_000, seconds: 10.0, corpus: 40, crashed: false },
            Report { target: "config", execs: 5000, seconds: 10.0, corpus: 9, crashed: true },
        ];
        let text = table(&reports);
        assert!(text.contains("shell") && text.contains("100000"), "{text}");
        assert!(text.ends_with("fuzz: 2 targets, 1005000 execs, 1 crashed\n"), "{text}");
    }
}
