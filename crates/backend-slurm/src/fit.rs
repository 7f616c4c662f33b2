//! The fit rule of `slurm` hosts, for the solver.
//!
//! A GPU request needs a GRES type for a specific chip (`gres_mapping`) and fits within the
//! host's optional `chips` cap, else the host is passed over (the request is never shrunk).
//! Partitions are tried in config order with `default: true` ones first. A request of at most
//! one node's GPUs must find them free on a single node (free GPUs are never summed across
//! nodes); a larger one spans `ceil(count / gpus_per_node)` whole nodes. Nodes that are down,
//! drained or named in `exclude` do not count. A host that could hold
//! the request but not now becomes a fallback candidate, ranked by its free GPUs.

use std::collections::BTreeMap;

use theseus_core::availability::{Availability, NodeAvailability, PartitionReport};
use theseus_core::chips::Chip;
use theseus_core::fit::{Layout, Outcome, Want, not_a_gpu, spread};

use crate::config::SlurmHost;
use crate::placement::SlurmPlacement;

/// Applies the Slurm rules to one host.
pub fn fit(gres_mapping: &BTreeMap<String, String>, host: &SlurmHost, want: &Want, avail: &Availability) -> Outcome {
    match *want {
        Want::Cpu { processes } => cpu(host, processes),
        Want::Gpu { chip, count } => gpu(gres_mapping, host, chip, count, avail),
        Want::Accelerator { chip, .. } => not_a_gpu(chip, "a Slurm host"),
    }
}

fn cpu(host: &SlurmHost, processes: u32) -> Outcome {
    let partition =
        host.cpu_partitions.first().map(String::as_str).or_else(|| host.partitions.first().map(|p| p.name()));
    match partition {
        Some(p) => Outcome::Fits {
            layout: SlurmPlacement { partition: Some(p.to_owned()), gres_type: None }.place(Layout::cpu(processes, 1)),
            reason: format!("partition {p}, {processes} node{} x 1 task", if processes == 1 { "" } else { "s" }),
        },
        None => Outcome::pass("no cpu_partitions or partitions configured"),
    }
}

/// The request as this host would run it, before looking at availability.
struct Ask<'a> {
    chip: Option<&'static Chip>,
    label: &'a str,
    count: u32,
    gres: Option<String>,
    limit: Option<u32>,
}

impl Ask<'_> {
    /// A layout of `count` chips on nodes of `per_node` GPUs in `partition`.
    fn layout(&self, partition: &str, per_node: u32) -> Layout {
        let (nodes, chips_per_node, note) = spread(self.count, per_node);
        let layout = Layout {
            chip: self.chip,
            nodes,
            chips_per_node,
            processes_per_node: 1,
            notes: note.into_iter().collect(),
            ..Layout::default()
        };
        SlurmPlacement { partition: Some(partition.to_owned()), gres_type: self.gres.clone() }.place(layout)
    }

    /// Passes the host over when rounding up to whole nodes goes past the `chips` cap.
    fn capped(&self, outcome: Outcome) -> Outcome {
        let layout = match &outcome {
            Outcome::Fits { layout, .. } | Outcome::Queue { layout, .. } => layout,
            Outcome::Pass { .. } => return outcome,
        };
        match self.limit {
            Some(limit) if layout.total_chips() > limit => Outcome::pass(format!(
                "needs {} {} on whole nodes; chips allows at most {limit}",
                layout.total_chips(),
                self.label
            )),
            _ => outcome,
        }
    }
}

fn gpu(
    gres_mapping: &BTreeMap<String, String>,
    host: &SlurmHost,
    chip: Option<&'static Chip>,
    count: u32,
    avail: &Availability,
) -> Outcome {
    let label = chip.map_or("GPU", |c| c.name);
    let mut limit = None;
    if let Some(caps) = host.chips.as_ref().filter(|m| !m.is_empty()) {
        let cap = match chip {
            Some(c) => caps.get(c.name).copied().unwrap_or(0),
            None => caps.values().copied().max().unwrap_or(0),
        };
        if cap == 0 {
            return Outcome::pass(format!("chips allows no {label}"));
        }
        if count > cap {
            return Outcome::pass(format!("needs {count} {label}; chips allows at most {cap}"));
        }
        limit = Some(cap);
    }
    let gres = match chip {
        Some(c) => match gres_mapping.get(c.name) {
            Some(g) => Some(g.clone()),
            None => return Outcome::pass(format!("no gres_mapping for {}", c.name)),
        },
        None => None,
    };
    let ask = Ask { chip, label, count, gres, limit };
    let mut ordered: Vec<_> = host.partitions.iter().filter(|p| p.is_default()).collect();
    ordered.extend(host.partitions.iter().filter(|p| !p.is_default()));
    let ordered: Vec<&str> = ordered.into_iter().map(|p| p.name()).collect();

    let outcome = match avail {
        Availability::Partitions(report) => from_report(host, &ask, &ordered, report),
        Availability::NotChecked => {
            let Some(first) = ordered.first() else {
                return Outcome::pass("no partitions configured and availability not checked");
            };
            let layout = trusted_layout(host, &ask, first);
            Outcome::Fits { layout, reason: format!("availability not checked; partition {first} from config") }
        }
        Availability::Unknown { reason } => unknown(host, &ask, &ordered, reason),
        Availability::Unusable { reason } => Outcome::pass(reason.clone()),
        Availability::Free { .. } => unknown(host, &ask, &ordered, "unexpected free-chips report"),
    };
    ask.capped(outcome)
}

/// The layout when nothing was measured: `gpus_per_node` if set, else one node.
fn trusted_layout(host: &SlurmHost, ask: &Ask<'_>, partition: &str) -> Layout {
    match host.gpus_per_node.filter(|&n| n > 0) {
        Some(per_node) => ask.layout(partition, per_node),
        None => {
            let mut layout = ask.layout(partition, ask.count);
            layout.notes.push("gpus_per_node unknown; asking for one node".into());
            layout
        }
    }
}

fn unknown(host: &SlurmHost, ask: &Ask<'_>, ordered: &[&str], reason: &str) -> Outcome {
    let Some(first) = ordered.first() else {
        return Outcome::pass(format!("availability unknown: {reason}"));
    };
    let mut layout = trusted_layout(host, ask, first);
    layout.notes.push(format!("availability unknown ({reason}); partition {first} from config"));
    Outcome::Queue { layout, free: 0, reason: format!("availability unknown: {reason}") }
}

/// How one partition can take the request.
struct PartitionFit<'a> {
    name: &'a str,
    per_node: u32,
    nodes: u32,
    chips_per_node: u32,
    /// Usable nodes with `chips_per_node` GPUs free now.
    ready: usize,
    /// Usable nodes with `chips_per_node` GPUs at all.
    holders: usize,
    /// Most GPUs free on one node.
    max_free: u32,
    /// Free GPUs over all eligible nodes, only for ranking fallback candidates.
    free_sum: u32,
}

fn from_report(host: &SlurmHost, ask: &Ask<'_>, ordered: &[&str], report: &PartitionReport) -> Outcome {
    let names: Vec<&str> = if ordered.is_empty() {
        report.partitions.iter().map(|p| p.name.as_str()).collect()
    } else {
        ordered.iter().copied().filter(|n| report.partitions.iter().any(|p| p.name == *n)).collect()
    };
    if names.is_empty() {
        return Outcome::pass(format!("partitions {} not reported by sinfo", ordered.join(", ")));
    }
    let fits: Vec<PartitionFit<'_>> = names.iter().filter_map(|name| partition_fit(host, ask, report, name)).collect();
    let kind = ask.gres.as_deref().map_or_else(|| "GPU".to_owned(), |g| format!("gres {g}"));
    if fits.is_empty() {
        return Outcome::pass(format!("no usable {kind} nodes in partitions {}", names.join(", ")));
    }
    if let Some(fit) = fits.iter().find(|f| f.ready >= f.nodes as usize) {
        let reason = if fit.nodes == 1 {
            format!("partition {}: a node has {} {} free", fit.name, fit.max_free, ask.label)
        } else {
            format!("partition {}: {} nodes have {} {} free", fit.name, fit.ready, fit.chips_per_node, ask.label)
        };
        return Outcome::Fits { layout: ask.layout(fit.name, fit.per_node), reason };
    }
    let free_sum = fits.iter().map(|f| f.free_sum).max().unwrap_or(0);
    let possible = fits.iter().filter(|f| f.holders >= f.nodes as usize);
    // The candidate partition with most free GPUs; earlier partitions win ties.
    let best = possible.fold(None::<&PartitionFit<'_>>, |best, f| match best {
        Some(b) if b.free_sum >= f.free_sum => Some(b),
        _ => Some(f),
    });
    match best {
        Some(fit) => {
            let reason = if fit.nodes == 1 {
                format!(
                    "needs {} {} on one node, at most {} free on a node now (partition {})",
                    ask.count, ask.label, fit.max_free, fit.name
                )
            } else {
                format!(
                    "needs {} nodes with {} {} free, {} now (partition {})",
                    fit.nodes, fit.chips_per_node, ask.label, fit.ready, fit.name
                )
            };
            Outcome::Queue { layout: ask.layout(fit.name, fit.per_node), free: fit.free_sum, reason }
        }
        None => {
            let fit = &fits[0];
            let reason = format!(
                "needs {} node{} with {} {}; partition {} has {}",
                fit.nodes,
                if fit.nodes == 1 { "" } else { "s" },
                fit.chips_per_node,
                ask.label,
                fit.name,
                fit.holders
            );
            Outcome::Pass { reason, free: Some(free_sum) }
        }
    }
}

fn partition_fit<'a>(
    host: &SlurmHost,
    ask: &Ask<'_>,
    report: &PartitionReport,
    name: &'a str,
) -> Option<PartitionFit<'a>> {
    let partition = report.partitions.iter().find(|p| p.name == name)?;
    let eligible: Vec<&NodeAvailability> = partition
        .nodes
        .iter()
        // Nodes named in `exclude` (`#SBATCH --exclude`) can never run the job.
        .filter(|n| n.usable && n.total > 0 && !host.exclude.contains(&n.name))
        .filter(|n| ask.gres.as_deref().is_none_or(|g| n.gpu_type.as_deref() == Some(g)))
        .collect();
    if eligible.is_empty() {
        return None;
    }
    let capacity = |n: &NodeAvailability| host.gpus_per_node.unwrap_or(n.total);
    let free = |n: &NodeAvailability| n.free.min(capacity(n));
    let per_node = host.gpus_per_node.unwrap_or_else(|| eligible.iter().map(|n| n.total).max().unwrap_or(0));
    if per_node == 0 {
        return None;
    }
    let (nodes, chips_per_node, _) = spread(ask.count, per_node);
    Some(PartitionFit {
        name,
        per_node,
        nodes,
        chips_per_node,
        ready: eligible.iter().filter(|n| free(n) >= chips_per_node).count(),
        holders: eligible.iter().filter(|n| capacity(n) >= chips_per_node).count(),
        max_free: eligible.iter().map(|n| free(n)).max().unwrap_or(0),
        free_sum: eligible.iter().fold(0u32, |sum, n| sum.saturating_add(free(n))),
    })
}
