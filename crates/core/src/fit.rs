//! The pieces of a host type's fit rule: the normalised request ([`Want`]), how a host would run
//! it ([`Layout`]) and its answer ([`Outcome`]), with the arithmetic the rules share. Pure.

use std::collections::BTreeMap;

use crate::availability::Availability;
use crate::chips::{self, Chip, ChipKind};
use crate::plan::{ChipRequest, MAX_COUNT, Request};

/// The request, normalized: CPU processes, a GPU chip (any if `None`) and count, or another
/// accelerator (a chip of the catalog that is neither a GPU nor a CPU) and count.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    /// CPU-only: this many processes.
    Cpu {
        /// Processes in all.
        processes: u32,
    },
    /// GPUs: of this chip (any if `None`), this many in all.
    Gpu {
        /// The chip; `None` for any GPU.
        chip: Option<&'static Chip>,
        /// Chips in all.
        count: u32,
    },
    /// An accelerator that is not a GPU, named by the request (never "any"): only a host type
    /// that offers this chip takes it; GPU and CPU host types pass on it ([`not_a_gpu`]).
    Accelerator {
        /// The chip.
        chip: &'static Chip,
        /// Chips in all.
        count: u32,
    },
}

impl Want {
    /// Normalises `request`; an impossible one (too many, no chips) is an error sentence.
    pub fn of(request: &Request) -> Result<Want, String> {
        if request.count > MAX_COUNT {
            return Err(format!(
                "a request can be for at most {MAX_COUNT} chips or processes; asked for {}",
                request.count
            ));
        }
        let count = request.count;
        let none = |name: &str| Err(format!("a {name} request needs at least one chip"));
        match request.chip {
            ChipRequest::Cpu => Ok(Want::Cpu { processes: count.max(1) }),
            ChipRequest::Chip(c) if c.kind == ChipKind::Cpu => Ok(Want::Cpu { processes: count.max(1) }),
            ChipRequest::AnyGpu if count == 0 => none("GPU"),
            ChipRequest::AnyGpu => Ok(Want::Gpu { chip: None, count }),
            ChipRequest::Chip(c) if count == 0 => none(c.name),
            ChipRequest::Chip(c) if c.kind == ChipKind::Gpu => Ok(Want::Gpu { chip: Some(c), count }),
            ChipRequest::Chip(chip) => Ok(Want::Accelerator { chip, count }),
        }
    }
}

/// The pass of a host type that runs GPU and CPU jobs only on a request for another
/// accelerator: `what` names the host (`this machine`, `a plain host`).
pub fn not_a_gpu(chip: &Chip, what: &str) -> Outcome {
    Outcome::pass(format!("{} is not a GPU; {what} runs GPU and CPU jobs only", chip.name))
}

/// How one host would run the request.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The chip the job gets (`None` for CPU-only).
    pub chip: Option<&'static Chip>,
    /// Machines the job spans.
    pub nodes: u32,
    /// Chips per node.
    pub chips_per_node: u32,
    /// Processes per node.
    pub processes_per_node: u32,
    /// Where on the host, in its type's own keys ([`crate::plan::Plan::placement`]).
    pub placement: crate::plan::Placement,
    /// The placement as text ([`crate::plan::Plan::placement_text`]).
    pub placement_text: String,
    /// Things the user should know.
    pub notes: Vec<String>,
}

impl Layout {
    /// A CPU-only layout.
    pub fn cpu(nodes: u32, processes_per_node: u32) -> Layout {
        Layout { nodes, processes_per_node, ..Layout::default() }
    }

    /// Chips in all.
    pub fn total_chips(&self) -> u32 {
        self.nodes.saturating_mul(self.chips_per_node)
    }
}

/// What one host can do with the request.
#[derive(Debug)]
pub enum Outcome {
    /// It fits now.
    Fits {
        /// How.
        layout: Layout,
        /// Why, in one sentence.
        reason: String,
    },
    /// It could hold the request but not now (a host whose scheduler queues): a fallback
    /// candidate ranked by `free`.
    Queue {
        /// How, once it runs.
        layout: Layout,
        /// Chips of the kind free now.
        free: u32,
        /// Why, in one sentence.
        reason: String,
    },
    /// It cannot serve the request; `free` is how many chips of the kind it has free, if known.
    Pass {
        /// Why, in one sentence.
        reason: String,
        /// Chips of the kind free now, if known.
        free: Option<u32>,
    },
}

impl Outcome {
    /// A pass with no count of free chips.
    pub fn pass(reason: impl Into<String>) -> Outcome {
        Outcome::Pass { reason: reason.into(), free: None }
    }
}

/// Nodes and chips per node for `count` chips on nodes of `per_node` chips (`per_node > 0`),
/// with a note when the total is rounded up to whole nodes.
pub fn spread(count: u32, per_node: u32) -> (u32, u32, Option<String>) {
    if count <= per_node {
        return (1, count, None);
    }
    let nodes = count.div_ceil(per_node);
    let total = nodes * per_node;
    let note = (total > count).then(|| format!("rounded up to {total} chips on {nodes} nodes ({per_node} per node)"));
    (nodes, per_node, note)
}

/// The chip with the most GPUs in a chips map (earlier key wins ties), if any count is positive.
pub fn largest_chip(chips: &BTreeMap<String, u32>) -> Option<(&str, u32)> {
    let mut best: Option<(&str, u32)> = None;
    for (name, &n) in chips {
        if n > 0 && best.is_none_or(|(_, b)| n > b) {
            best = Some((name.as_str(), n));
        }
    }
    best
}

/// `chips` as `h100: 8, l40: 2` for reasons, or `none`.
pub fn list_chips(chips: &BTreeMap<String, u32>) -> String {
    if chips.is_empty() {
        return "none".into();
    }
    chips.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
}

/// The rule of a single machine with a `chips` map: `count` GPUs of `chip` (any type if `None`)
/// on one node, capped by what its backend measured (an unknown availability passes the host
/// over), run by `processes_per_node` processes.
pub fn one_machine(
    chips_map: &BTreeMap<String, u32>,
    chip: Option<&'static Chip>,
    count: u32,
    avail: &Availability,
    processes_per_node: u32,
) -> Outcome {
    match gpus(chips_map, chip, count, avail) {
        Ok(fit) => fit.into_outcome(count, processes_per_node),
        Err(outcome) => outcome,
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
// The error is the answer itself (a pass), made once per host and solve: boxing it gains nothing.
#[allow(clippy::result_large_err)]
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
        Availability::Partitions(_) => {
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

/// `es` unless `n` is 1 (`process`/`processes`).
pub fn plural_es(n: u32) -> &'static str {
    if n == 1 { "" } else { "es" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Request;

    fn want(chip: ChipRequest, count: u32) -> Result<Want, String> {
        Want::of(&Request { chip, count, preferred_clusters: vec![], forbidden_clusters: vec![], host: None })
    }

    #[test]
    fn a_chip_that_is_neither_gpu_nor_cpu_is_an_accelerator_and_any_gpu_stays_a_gpu() {
        let accelerator = chips::CATALOG.iter().find(|c| !matches!(c.kind, ChipKind::Gpu | ChipKind::Cpu)).unwrap();
        let Ok(Want::Accelerator { chip, count: 8 }) = want(ChipRequest::Chip(accelerator), 8) else {
            panic!("{} is an accelerator", accelerator.name)
        };
        assert_eq!(chip.name, accelerator.name);
        assert_eq!(
            want(ChipRequest::Chip(accelerator), 0).unwrap_err(),
            format!("a {accelerator} request needs at least one chip")
        );
        assert!(matches!(want(ChipRequest::AnyGpu, 2), Ok(Want::Gpu { chip: None, count: 2 })));
        let h100 = chips::lookup("h100").unwrap();
        assert!(matches!(want(ChipRequest::Chip(h100), 2), Ok(Want::Gpu { chip: Some(_), count: 2 })));
        assert_eq!(want(ChipRequest::AnyGpu, 0).unwrap_err(), "a GPU request needs at least one chip");
    }
}
