//! Solver rules for single machines: `local` (this machine) and `plain` (a GPU box over SSH).
//!
//! Both serve a GPU request from their `chips` map on one node. The availability the backend
//! measured (`nvidia-smi`, counting only GPUs of the requested type) caps the configured count;
//! an unknown availability passes the host over.

use std::collections::BTreeMap;

use super::{Layout, Outcome, Want, largest_chip, list_chips};
use crate::availability::Availability;
use crate::chips::{self, Chip};
use crate::config::{LocalHost, PlainHost};

/// Rules for a `local` host: CPU jobs run `processes` processes (the request's count when it
/// asks for more than one, else the host's `processes`), at most one per CPU of the machine (as
/// measured) unless the host has `oversubscribe`; GPU jobs run `processes` processes sharing
/// the requested GPUs.
pub(super) fn local(host: &LocalHost, want: &Want, avail: &Availability) -> Outcome {
    match *want {
        Want::Cpu { processes } => {
            let processes = if processes > 1 { processes } else { host.processes.unwrap_or(1).max(1) };
            if let Availability::Free { chips: cpus, .. } = avail
                && processes > *cpus
                && !host.oversubscribe
            {
                return Outcome::Pass {
                    reason: format!(
                        "needs {processes} processes, this machine has {cpus} CPU{} (pass \
                         --oversubscribe, or set `oversubscribe: true` on the host, to run more \
                         processes than CPUs)",
                        if *cpus == 1 { "" } else { "s" }
                    ),
                    free: Some(*cpus),
                };
            }
            Outcome::Fits {
                layout: Layout::cpu(1, processes),
                reason: format!("runs {processes} process{} here", plural_es(processes)),
            }
        }
        Want::Gpu { chip, count } => match gpus(&host.chips, chip, count, avail) {
            Ok(fit) => fit.into_outcome(count, host.processes.unwrap_or(1).max(1)),
            Err(outcome) => outcome,
        },
    }
}

/// Rules for a `plain` host: one process, CPU-only or on `count` GPUs of one type.
pub(super) fn plain(host: &PlainHost, want: &Want, avail: &Availability) -> Outcome {
    match *want {
        Want::Cpu { processes: 1 } => Outcome::Fits { layout: Layout::cpu(1, 1), reason: "runs one process".into() },
        Want::Cpu { processes } => Outcome::pass(format!("plain hosts run one process; asked for {processes}")),
        Want::Gpu { chip, count } => match gpus(&host.chips, chip, count, avail) {
            Ok(fit) => fit.into_outcome(count, 1),
            Err(outcome) => outcome,
        },
    }
}

/// GPUs of one type on a machine that can take the request.
struct MachineFit {
    chip: Option<&'static Chip>,
    name: String,
    free: u32,
    source: String,
    notes: Vec<String>,
}

impl MachineFit {
    fn into_outcome(self, count: u32, processes_per_node: u32) -> Outcome {
        let layout = Layout {
            chip: self.chip,
            nodes: 1,
            chips_per_node: count,
            processes_per_node,
            notes: self.notes,
            ..Layout::default()
        };
        Outcome::Fits { layout, reason: format!("needs {count} {}, {} free ({})", self.name, self.free, self.source) }
    }
}

/// Checks a machine's `chips` and availability for `count` GPUs of `chip` (any type if `None`).
fn gpus(
    chips_map: &BTreeMap<String, u32>,
    chip: Option<&'static Chip>,
    count: u32,
    avail: &Availability,
) -> Result<MachineFit, Outcome> {
    let mut notes = Vec::new();
    let (name, configured) = match chip {
        Some(c) => match chips_map.get(c.name) {
            Some(&n) if n > 0 => (c.name.to_owned(), n),
            _ => {
                return Err(Outcome::pass(format!("no {} in chips ({})", c.name, list_chips(chips_map))));
            }
        },
        None => match largest_chip(chips_map) {
            Some((name, n)) => {
                if chips_map.values().filter(|&&v| v > 0).count() > 1 {
                    notes.push(format!("any GPU: using {name}, the type with most GPUs ({n})"));
                }
                (name.to_owned(), n)
            }
            None => return Err(Outcome::pass("no GPUs in chips")),
        },
    };
    if count > configured {
        return Err(Outcome::Pass {
            reason: format!("needs {count} {name}, has {configured}"),
            free: Some(configured),
        });
    }
    let (free, source) = match avail {
        Availability::NotChecked => (configured, "not checked; configured".to_owned()),
        Availability::Free { chips, source } => ((*chips).min(configured), source.clone()),
        Availability::Unknown { reason } => {
            return Err(Outcome::pass(format!("availability unknown: {reason}")));
        }
        Availability::Unusable { reason } => return Err(Outcome::pass(reason.clone())),
        Availability::Slurm(_) => {
            return Err(Outcome::pass("availability unknown: unexpected slurm report"));
        }
    };
    if free < count {
        return Err(Outcome::Pass {
            reason: format!("needs {count} {name}, {free} free ({source})"),
            free: Some(free),
        });
    }
    let chip = chip.or_else(|| chips::lookup(&name));
    Ok(MachineFit { chip, name, free, source, notes })
}

fn plural_es(n: u32) -> &'static str {
    if n == 1 { "" } else { "es" }
}
