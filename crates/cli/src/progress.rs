//! A byte-progress line on stderr for shipping code (redrawn in place on a terminal, printed
//! every 25 % otherwise).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use theseus_core::backend::ProgressFn;

/// A progress callback that reports shipped bytes under `label`.
pub(crate) fn bytes(label: &str, quiet: bool) -> ProgressFn {
    let label = label.to_owned();
    let tty = std::io::stderr().is_terminal();
    let last_quarter = Arc::new(AtomicU64::new(0));
    Arc::new(move |done: u64, total: Option<u64>| {
        // The total is an estimate; never show more done than the total.
        let done = total.map_or(done, |t| done.min(t));
        if quiet {
            return;
        }
        let total_s = total.map(human).unwrap_or_else(|| "?".into());
        if tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{label}: {} / {total_s}   ", human(done));
            if total.is_some_and(|t| done >= t) {
                let _ = writeln!(err);
            }
        } else if let Some(t) = total.filter(|t| *t > 0) {
            let quarter = (done.min(t) * 4 / t).min(4);
            if quarter > last_quarter.swap(quarter, Ordering::Relaxed) {
                eprintln!("{label}: {} / {total_s}", human(done));
            }
        }
    })
}

/// Bytes in a short human form.
pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_read_like_du_h() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }
}
