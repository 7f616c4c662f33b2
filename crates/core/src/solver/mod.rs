//! The hardware solver: picks one host for a request, in pure code (no IO).
//!
//! `solve(config, request, availability) -> Plan` keeps the original's rules (priority order then
//! config order, first fit, per-type eligibility, Volcano `nodes = ceil(n / chips_per_node)`,
//! Slurm partitions and `gres_mapping`, fallback to the Slurm host with the most free GPUs) and
//! records, for every host it looked at, why it was taken or passed over.

pub mod render;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::availability::Availability;
use crate::chips::Chip;
use crate::config::{DispatchConfig, HostKind};

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
            ChipRequest::Cpu => write!(f, "cpu-only ({} process{})", self.count.max(1), if self.count.max(1) == 1 { "" } else { "es" }),
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
    /// Slurm partition.
    pub partition: Option<String>,
    /// Slurm GRES type token (`h100` in `gpu:h100:4`), `None` for untyped or no GPUs.
    pub gres_type: Option<String>,
    /// The job is sent although no host has the capacity free now; the scheduler queues it.
    pub queued: bool,
    /// Things the user should know (e.g. the fallback, a partial node).
    pub notes: Vec<String>,
    /// Every host looked at, in order, with the verdict.
    pub considered: Vec<Consideration>,
}

impl Plan {
    /// Processes of the whole job.
    pub fn processes(&self) -> u32 {
        self.nodes * self.processes_per_node
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

/// No host can serve the request. Carries what was looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot satisfy {request}: {summary}")]
pub struct SolveError {
    /// The request, as text.
    pub request: String,
    /// A one-line reason.
    pub summary: String,
    /// Every host looked at.
    pub considered: Vec<Consideration>,
}

/// Picks a host for `request`. `availability` maps host names to what their backends measured;
/// a host missing from the map counts as [`Availability::NotChecked`].
pub fn solve(
    config: &DispatchConfig,
    request: &Request,
    availability: &BTreeMap<String, Availability>,
) -> Result<Plan, SolveError> {
    let _ = (config, availability);
    Err(SolveError {
        request: request.to_string(),
        summary: "solver not written yet".into(),
        considered: Vec::new(),
    })
}
