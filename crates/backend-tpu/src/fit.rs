//! The solver's rule for `tpu` hosts, as the original's (its §2 TPU rule): a TPU VM serves only a
//! request naming its own chip, takes the whole slice (all its chips, one process per worker),
//! and only while its VM is absent (the submit creates it) or `READY` (reused).
//!
//! - CPU requests and any-GPU requests pass (TPUs never serve them), and so does a named GPU;
//! - `Want::Accelerator` of the host's chip with a count up to the slice's chips fits the whole
//!   slice (a note says so when that is more than asked); another chip passes;
//! - availability ([`availability`], from the backend): absent or `READY` fit, any other state
//!   passes naming it.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use theseus_core::availability::Availability;
use theseus_core::fit::{Layout, Outcome, Want};

use crate::config::{Accelerator, TpuSettings};

/// What the backend saw of the VM, as the fit rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmSeen {
    /// No such node: a submit creates it.
    Absent,
    /// The node is `READY`: a submit reuses it.
    Ready,
    /// The node is in another state (named as the API names it).
    Other(String),
}

/// The availability the backend reports for a VM in `seen`, of accelerator `accel`.
pub fn availability(name: &str, accel: &Accelerator, seen: &VmSeen) -> Availability {
    match seen {
        VmSeen::Absent => Availability::Free { chips: accel.chips, source: format!("creates VM `{name}`") },
        VmSeen::Ready => Availability::Free { chips: accel.chips, source: format!("reuses VM `{name}`, READY") },
        VmSeen::Other(state) => Availability::Unusable {
            reason: format!("VM `{name}` is {state}: neither absent (to create) nor READY (to reuse)"),
        },
    }
}

/// The rule: see the module docs.
pub fn fit(settings: &TpuSettings, want: &Want, availability: &Availability) -> Outcome {
    let accel = match crate::config::accelerator(&settings.accelerator_type) {
        Ok(a) => a,
        Err(e) => return Outcome::pass(format!("accelerator_type: {e}")),
    };
    let count = match *want {
        Want::Cpu { .. } => {
            return Outcome::pass("TPU VMs run no CPU-only jobs; ask for a TPU chip (e.g. --chip tpu-v4)");
        }
        Want::Gpu { chip: None, .. } => return Outcome::pass("a TPU VM has no GPUs"),
        Want::Gpu { chip: Some(c), .. } => {
            return Outcome::pass(format!("{} is a GPU; this host has {}", c.name, accel.chip.name));
        }
        Want::Accelerator { chip, count: _ } if chip.name != accel.chip.name => {
            return Outcome::pass(format!("has {}, asked for {}", accel.chip.name, chip.name));
        }
        Want::Accelerator { count, .. } => count,
    };
    let shape = format!(
        "{} ({} {} on {} worker{})",
        settings.accelerator_type,
        accel.chips,
        accel.chip.name,
        accel.workers,
        if accel.workers == 1 { "" } else { "s" }
    );
    if count > accel.chips {
        return Outcome::Pass {
            reason: format!("needs {count} {}, the slice {shape} has {}", accel.chip.name, accel.chips),
            free: Some(accel.chips),
        };
    }
    let how = match availability {
        Availability::NotChecked => "not checked".to_owned(),
        Availability::Free { source, .. } => source.clone(),
        Availability::Unknown { reason } => return Outcome::pass(format!("availability unknown: {reason}")),
        Availability::Unusable { reason } => return Outcome::pass(reason.clone()),
        Availability::Partitions(_) => return Outcome::pass("availability unknown: unexpected partition report"),
    };
    let mut notes = Vec::new();
    if count < accel.chips {
        notes.push(format!("a TPU slice is taken whole: asked for {count}, gets all {} chips of {shape}", accel.chips));
    }
    let layout = Layout {
        chip: Some(accel.chip),
        nodes: accel.workers,
        chips_per_node: accel.chips_per_worker,
        processes_per_node: 1,
        notes,
        ..Layout::default()
    };
    Outcome::Fits { layout, reason: format!("fits the whole slice {shape}; {how}") }
}

#[cfg(test)]
mod tests {
    use theseus_core::chips;

    use super::*;

    fn host(accelerator_type: &str) -> TpuSettings {
        TpuSettings {
            accelerator_type: accelerator_type.into(),
            zone: "us-central2-b".into(),
            ..TpuSettings::default()
        }
    }

    fn tpu(name: &str, count: u32) -> Want {
        Want::Accelerator { chip: chips::lookup(name).unwrap(), count }
    }

    fn fits(o: &Outcome) -> (&Layout, &str) {
        match o {
            Outcome::Fits { layout, reason } => (layout, reason),
            other => panic!("expected a fit: {other:?}"),
        }
    }

    fn passes(o: &Outcome) -> &str {
        match o {
            Outcome::Pass { reason, .. } => reason,
            other => panic!("expected a pass: {other:?}"),
        }
    }

    #[test]
    fn the_hosts_chip_fits_the_whole_slice_one_process_per_worker() {
        let h = host("v4-32");
        let accel = h.accelerator().unwrap();
        let avail = availability("big", &accel, &VmSeen::Absent);
        let o = fit(&h, &tpu("tpu-v4", 4), &avail);
        let (layout, reason) = fits(&o);
        assert_eq!((layout.nodes, layout.chips_per_node, layout.processes_per_node), (4, 4, 1));
        assert_eq!(layout.total_chips(), 16);
        assert!(reason.contains("creates VM `big`"), "{reason}");
        assert!(layout.notes[0].contains("asked for 4, gets all 16"), "{:?}", layout.notes);
        let o = fit(&h, &tpu("tpu-v4", 16), &availability("big", &accel, &VmSeen::Ready));
        let (layout, reason) = fits(&o);
        assert!(layout.notes.is_empty() && reason.contains("reuses VM `big`, READY"), "{reason}");
        // v6e counts chips: v6e-8 is one worker of 8.
        let h = host("v6e-8");
        let o = fit(&h, &tpu("tpu-v6e", 8), &Availability::NotChecked);
        assert_eq!(fits(&o).0.nodes, 1);
    }

    #[test]
    fn cpu_gpu_other_chips_too_many_and_busy_vms_pass() {
        let h = host("v4-8");
        let accel = h.accelerator().unwrap();
        let ok = availability("t", &accel, &VmSeen::Ready);
        assert!(passes(&fit(&h, &Want::Cpu { processes: 1 }, &ok)).contains("CPU-only"));
        assert!(passes(&fit(&h, &Want::Gpu { chip: None, count: 1 }, &ok)).contains("no GPUs"));
        let h100 = chips::lookup("h100").unwrap();
        assert!(passes(&fit(&h, &Want::Gpu { chip: Some(h100), count: 1 }, &ok)).contains("is a GPU"));
        assert!(passes(&fit(&h, &tpu("tpu-v5p", 4), &ok)).contains("has tpu-v4, asked for tpu-v5p"));
        let too_many = fit(&h, &tpu("tpu-v4", 8), &ok);
        assert!(matches!(too_many, Outcome::Pass { free: Some(4), .. }), "{too_many:?}");
        let preempted = availability("t", &accel, &VmSeen::Other("PREEMPTED".into()));
        assert!(passes(&fit(&h, &tpu("tpu-v4", 4), &preempted)).contains("is PREEMPTED"));
        assert!(passes(&fit(&host("v4-7"), &tpu("tpu-v4", 1), &ok)).starts_with("accelerator_type:"));
    }
}
