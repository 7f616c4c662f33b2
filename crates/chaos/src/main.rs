//! `theseus-chaos`: the fault matrix that `cargo xtask chaos` runs (see `docs/ARCHITECTURE.md`,
//! "Fault matrix"). For each flow of the real `theseus` binary against the Kubernetes simulator
//! (`submit`, `status`, `logs -f`, `cancel`, `gc`), it first counts the API requests a clean run
//! makes, then, in a fresh cluster each time, fails the n-th request (for every n) with each
//! fault (HTTP 500, 429, 409, a reset connection; a request that never answers with `--full`)
//! and judges the case: the command succeeded, or failed with one clear `error:` line; it did not
//! hang or panic; and it left nothing behind (no helper job or pod, no Secret without its Job, no
//! Job the ledger does not know). Prints one table row per flow and every bad case, and exits 1
//! when there is one.
//!
//! Usage: `theseus-chaos --theseus PATH [--full] [--flows submit,cancel,...]`.

mod matrix;
mod volcano;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut theseus, mut full, mut flows) = (None, false, Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--theseus" => theseus = args.next().map(PathBuf::from),
            "--full" => full = true,
            "--flows" => flows = args.next().unwrap_or_default().split(',').map(str::to_owned).collect(),
            other => {
                eprintln!("theseus-chaos: unknown argument `{other}`; usage: --theseus PATH [--full] [--flows a,b]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(theseus) = theseus else {
        eprintln!("theseus-chaos: --theseus PATH (the binary under test) is required");
        return ExitCode::from(2);
    };
    let started = std::time::Instant::now();
    let cases = match volcano::run(&theseus, full, &flows) {
        Ok(cases) => cases,
        Err(e) => {
            eprintln!("theseus-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", matrix::table("volcano (simulator)", &cases));
    let bad = matrix::bad(&cases);
    for case in &bad {
        println!("BAD {case}");
    }
    println!(
        "chaos: {} cases, {} bad, {:.0}s{}",
        cases.len(),
        bad.len(),
        started.elapsed().as_secs_f64(),
        if full { " (full)" } else { " (short: no hanging requests, 409 only on submit)" }
    );
    if bad.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
