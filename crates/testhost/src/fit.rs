//! The sandbox's rule for the solver: a CPU job fits when it asks for no more processes than
//! the host has `slots`; anything else passes with the reason.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use theseus_core::fit::{Layout, Outcome, Want, plural_es};

/// How a sandbox of `slots` slots would run `want`.
pub fn fit(slots: u32, want: &Want) -> Outcome {
    match *want {
        Want::Cpu { processes } if processes <= slots => Outcome::Fits {
            layout: Layout::cpu(1, processes),
            reason: format!("runs {processes} process{} in the sandbox ({slots} slots)", plural_es(processes)),
        },
        Want::Cpu { processes } => Outcome::Pass {
            reason: format!(
                "needs {processes} processes, the sandbox has {slots} slot{} (raise `slots` on the host)",
                if slots == 1 { "" } else { "s" }
            ),
            free: Some(slots),
        },
        Want::Gpu { .. } => Outcome::pass("a sandbox has no GPUs"),
        Want::Accelerator { chip, .. } => Outcome::pass(format!("a sandbox has no {chip}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_up_to_its_slots_and_passes_with_the_reason_beyond() {
        let Outcome::Fits { layout, reason } = fit(4, &Want::Cpu { processes: 4 }) else { panic!("4 of 4 fits") };
        assert_eq!((layout.nodes, layout.processes_per_node), (1, 4));
        assert_eq!(reason, "runs 4 processes in the sandbox (4 slots)");
        let Outcome::Pass { reason, free } = fit(4, &Want::Cpu { processes: 5 }) else { panic!("5 of 4 passes") };
        assert_eq!(reason, "needs 5 processes, the sandbox has 4 slots (raise `slots` on the host)");
        assert_eq!(free, Some(4));
        assert!(matches!(fit(4, &Want::Gpu { chip: None, count: 1 }), Outcome::Pass { .. }));
    }
}
