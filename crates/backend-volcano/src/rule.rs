//! The fit rule of `volcano` hosts, for the solver (Kubernetes with the Volcano batch scheduler).
//!
//! One pod runs on one node with one chip type, so a pod's GPU count is `chips[chip]` for a
//! specific chip and the largest entry for any GPU (never the sum of the map), falling back to
//! `gpus_per_node`. The job spans `ceil(count / chips_per_node)` pods; the queue must have the
//! rounded-up total free, and an unknown queue lets the scheduler decide.

use theseus_core::availability::Availability;
use theseus_core::chips;
use theseus_core::fit::{Layout, Outcome, Want, largest_chip, list_chips, not_a_gpu, spread};

use crate::config::VolcanoHost;

/// Applies the Volcano rules to one host.
pub fn solve(host: &VolcanoHost, want: &Want, avail: &Availability) -> Outcome {
    let (chip, count) = match *want {
        Want::Cpu { processes } => {
            return Outcome::Fits {
                layout: Layout::cpu(processes, 1),
                reason: format!("{processes} pod{} of one process", if processes == 1 { "" } else { "s" }),
            };
        }
        Want::Gpu { chip, count } => (chip, count),
        Want::Accelerator { chip, .. } => return not_a_gpu(chip, "a Volcano host"),
    };
    let mut notes = Vec::new();
    let (chip, label, from_chips) = match chip {
        Some(c) => match host.chips.get(c.name) {
            Some(&n) => (Some(c), c.name.to_owned(), n),
            None => {
                return Outcome::pass(format!("no {} in chips ({})", c.name, list_chips(&host.chips)));
            }
        },
        None => match largest_chip(&host.chips) {
            Some((name, n)) => {
                if host.chips.values().filter(|&&v| v > 0).count() > 1 {
                    notes.push(format!("any GPU: pods sized for {name} ({n} per node)"));
                }
                (chips::lookup(name), name.to_owned(), n)
            }
            None => (None, "GPU".to_owned(), 0),
        },
    };
    let per_node = if from_chips > 0 { from_chips } else { host.gpus_per_node };
    if per_node == 0 {
        return Outcome::pass(format!("no GPUs per node for {label} (chips and gpus_per_node are empty)"));
    }
    let (nodes, chips_per_node, rounding) = spread(count, per_node);
    if nodes == 1 && count < per_node {
        notes.push(format!("partial node: {count} of {per_node} {label}"));
    }
    notes.extend(rounding);
    let total = nodes * chips_per_node;
    let availability = match avail {
        Availability::NotChecked => "queue not checked".to_owned(),
        Availability::Free { chips, source } => {
            if *chips < total {
                return Outcome::Pass {
                    reason: format!("needs {total} {label}, {chips} free ({source})"),
                    free: Some(*chips),
                };
            }
            format!("{chips} free ({source})")
        }
        Availability::Unusable { reason } => return Outcome::pass(reason.clone()),
        Availability::Unknown { reason } => {
            notes.push(format!("queue availability unknown ({reason}); the scheduler will queue the job if needed"));
            "queue availability unknown".to_owned()
        }
        Availability::Partitions(_) => {
            notes.push(
                "queue availability unknown (unexpected slurm report); the scheduler will queue the job if needed"
                    .into(),
            );
            "queue availability unknown".to_owned()
        }
    };
    let layout = Layout { chip, nodes, chips_per_node, processes_per_node: 1, notes, ..Layout::default() };
    let pods = if nodes == 1 { "pod" } else { "pods" };
    Outcome::Fits { layout, reason: format!("{nodes} {pods} x {chips_per_node} {label} = {total}, {availability}") }
}
