//! What a solve produces and what it starts from: the [`Request`], the [`Plan`] a backend
//! submits, the [`Consideration`] of every host looked at, and the [`HostKind`] names they carry.
//! Plain data, below the config, the solver and the backends that all use it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::chips::Chip;

/// The most chips (or CPU processes) a request may ask for, and the most a config may give a
/// host: every count is checked against it before any arithmetic, so that no product or sum of
/// counts can overflow.
pub const MAX_COUNT: u32 = 65_536;

/// The type of a host, by name: `local`, or the name a host type declares (`type:` in files).
/// Kept as text in plans, handles and the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostKind(Cow<'static, str>);

impl HostKind {
    /// The local host type (this machine), the one type core implements.
    pub const LOCAL: HostKind = HostKind::named("local");

    /// The kind named `name`.
    pub const fn named(name: &'static str) -> HostKind {
        HostKind(Cow::Borrowed(name))
    }

    /// The name, as written in `type:`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for HostKind {
    fn from(name: String) -> HostKind {
        HostKind(Cow::Owned(name))
    }
}

impl PartialEq<str> for HostKind {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl std::fmt::Display for HostKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for HostKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for HostKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(HostKind::from)
    }
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Which chip.
    pub chip: ChipRequest,
    /// How many chips in total; for [`ChipRequest::Cpu`], how many processes (0 counts as 1).
    pub count: u32,
    /// Only hosts of these clusters (empty: any).
    pub preferred_clusters: Vec<String>,
    /// Never hosts of these clusters.
    pub forbidden_clusters: Vec<String>,
    /// Only this host.
    pub host: Option<String>,
}

/// The chip part of a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChipRequest {
    /// CPU only.
    Cpu,
    /// Any GPU.
    AnyGpu,
    /// This chip.
    Chip(&'static Chip),
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.chip {
            ChipRequest::Cpu => {
                write!(f, "cpu-only ({} process{})", self.count.max(1), if self.count.max(1) == 1 { "" } else { "es" })
            }
            ChipRequest::AnyGpu => write!(f, "{} x any-gpu", self.count),
            ChipRequest::Chip(c) => write!(f, "{} x {}", self.count, c.name),
        }
    }
}

/// The solver's answer: where and how a job runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Chosen host.
    pub host: String,
    /// Its type.
    pub kind: HostKind,
    /// Its cluster.
    pub cluster: String,
    /// The chip the job gets (`None` for CPU-only).
    pub chip: Option<&'static Chip>,
    /// Machines (pods, Slurm nodes) the job spans.
    pub nodes: u32,
    /// Chips per node: the one number every renderer uses for the per-node GPU request.
    pub chips_per_node: u32,
    /// Processes per node (1 on clusters; N for a local multi-process job).
    pub processes_per_node: u32,
    /// Chips the job gets in total.
    pub total_chips: u32,
    /// Where on the host the job goes, in its type's own keys (a partition, a GRES type): written
    /// by the type's fit rule, read by its backend; shown among the plan's keys.
    #[serde(flatten)]
    pub placement: Placement,
    /// The placement as the end of [`crate::solver::describe_plan`]'s line (`, partition gpu`).
    #[serde(skip)]
    pub placement_text: String,
    /// The job is sent although no host has the capacity free now; the scheduler queues it.
    pub queued: bool,
    /// Things the user should know (e.g. the fallback, a partial node).
    pub notes: Vec<String>,
    /// Every host looked at, in order, with the verdict.
    pub considered: Vec<Consideration>,
}

/// A host type's own placement keys, in the order its fit rule wrote them; `None`: the key
/// applies and has no value.
pub type Placement = indexmap::IndexMap<String, Option<String>>;

impl Plan {
    /// Processes of the whole job.
    pub fn processes(&self) -> u32 {
        self.nodes.saturating_mul(self.processes_per_node)
    }

    /// The chips the run gets, as the ledger keeps and the dashboard shows them: `8 x h100`,
    /// `4 x tpu-v4` (the plan's chip), `8 x gpu` (GPUs of a type the host does not name),
    /// `2 x cpu` (processes of a CPU-only job).
    pub fn chips_shown(&self) -> String {
        match self.chip {
            Some(chip) if chip.kind != crate::chips::ChipKind::Cpu => format!("{} x {}", self.total_chips, chip.name),
            None if self.total_chips > 0 => format!("{} x gpu", self.total_chips),
            _ => format!("{} x cpu", self.processes().max(1)),
        }
    }
}

/// Why one host was taken or passed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consideration {
    /// Host name.
    pub host: String,
    /// Host type.
    pub kind: HostKind,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in one short sentence.
    pub reason: String,
}

/// Verdict of a [`Consideration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The chosen host.
    Chosen,
    /// Eligible but not chosen (an earlier host won, or it lost the fallback).
    Eligible,
    /// Cannot serve the request.
    Passed,
    /// Filtered out by the cluster or host filters before looking.
    Filtered,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chips::lookup;

    fn plan(chip: Option<&str>, nodes: u32, chips_per_node: u32, processes_per_node: u32) -> Plan {
        Plan {
            host: "h".into(),
            kind: HostKind::LOCAL,
            cluster: "c".into(),
            chip: chip.map(|name| lookup(name).unwrap()),
            nodes,
            chips_per_node,
            processes_per_node,
            total_chips: nodes * chips_per_node,
            placement: Placement::default(),
            placement_text: String::new(),
            queued: false,
            notes: vec![],
            considered: vec![],
        }
    }

    #[test]
    fn chips_shown_names_the_chip_and_counts_every_host() {
        assert_eq!(plan(Some("h100"), 1, 8, 1).chips_shown(), "8 x h100", "a GPU type");
        assert_eq!(plan(Some("h100"), 2, 8, 1).chips_shown(), "16 x h100", "several hosts");
        assert_eq!(plan(None, 1, 8, 1).chips_shown(), "8 x gpu", "any GPU");
        assert_eq!(plan(None, 3, 0, 2).chips_shown(), "6 x cpu", "CPU processes on several hosts");
        assert_eq!(plan(None, 1, 0, 0).chips_shown(), "1 x cpu", "a CPU job has a process");
        assert_eq!(plan(Some("cpu"), 1, 0, 2).chips_shown(), "2 x cpu", "the cpu chip");
        assert_eq!(plan(Some("tpu-v4"), 1, 4, 1).chips_shown(), "4 x tpu-v4", "a TPU");
        assert_eq!(plan(Some("tpu-v4"), 2, 4, 1).chips_shown(), "8 x tpu-v4", "a TPU pod of several hosts");
    }
}
