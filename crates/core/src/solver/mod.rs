//! The hardware solver: picks one host for a request, in pure code (no IO).
//!
//! `solve(config, request, availability) -> Plan` keeps the original's rules: priority order then
//! config order, first fit, each host judged by its type's fit rule ([`crate::config::HostSettings::fit`]),
//! and, when nothing fits now, a fallback to the host that will queue the request with the most
//! free chips. It records, for every host it looked at, why it was taken or passed over.
//!
//! [`render`] turns the result into text. CPU-only requests do not consult availability.

use std::collections::BTreeMap;

use crate::availability::Availability;
use crate::config::{DispatchConfig, HostConfig};
pub use crate::fit::{Layout, Outcome, Want};
pub use crate::plan::{ChipRequest, Consideration, Plan, Request, Verdict};

mod hints;
pub mod render;

pub use render::{describe_plan, render_table};

pub use crate::plan::MAX_COUNT;

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
    /// What to change so that the request fits (`hint:` lines), most useful first.
    pub hints: Vec<String>,
}

/// Picks a host for `request`. `availability` maps host names to what their backends measured;
/// a host missing from the map counts as [`Availability::NotChecked`].
///
/// Hosts are tried in [`DispatchConfig::ordered_hosts`] order after the host and cluster filters;
/// the first host that fits now wins. When none fits now, the queueing host that could hold the
/// request with the most free GPUs is chosen and the plan is marked [`Plan::queued`].
pub fn solve(
    config: &DispatchConfig,
    request: &Request,
    availability: &BTreeMap<String, Availability>,
) -> Result<Plan, SolveError> {
    let fail = |summary: String, considered: Vec<Consideration>| SolveError {
        request: request.to_string(),
        summary,
        considered,
        hints: Vec::new(),
    };
    let want = match Want::of(request) {
        Ok(want) => want,
        Err(summary) => return Err(fail(summary, Vec::new())),
    };
    if config.hosts.is_empty() {
        return Err(fail("no hosts configured".into(), Vec::new()));
    }
    if let Some(name) = &request.host
        && !config.hosts.contains_key(name.as_str())
    {
        return Err(fail(unknown_host(config, name), Vec::new()));
    }

    let mut considered: Vec<Consideration> = Vec::new();
    // Hosts that could hold the request but not now: (index in `considered`, layout, free).
    let mut candidates: Vec<(usize, Layout, u32)> = Vec::new();
    // The host that came closest, for the error summary: (host, free chips).
    let mut closest: Option<(String, u32)> = None;
    let mut chosen: Option<(String, &HostConfig, Layout)> = None;

    for (name, host) in config.ordered_hosts() {
        let mut record = |verdict: Verdict, reason: String| {
            considered.push(Consideration { host: name.to_owned(), kind: host.kind(), verdict, reason });
            considered.len() - 1
        };
        if let Some(reason) = filter_reason(request, name, host) {
            record(Verdict::Filtered, reason);
            continue;
        }
        if chosen.is_some() {
            continue;
        }
        let avail = availability.get(name).unwrap_or(&NOT_CHECKED);
        let outcome = match avail {
            // Unusable until the user acts (a refused host key, a missing queue), for any request.
            Availability::Unusable { reason } => Outcome::pass(reason.clone()),
            _ => host.fit(&config.gres_mapping, &want, avail),
        };
        match outcome {
            Outcome::Fits { layout, reason } => {
                record(Verdict::Chosen, reason);
                chosen = Some((name.to_owned(), host, layout));
            }
            Outcome::Queue { layout, free, reason } => {
                let idx = record(Verdict::Passed, reason);
                note_closest(&mut closest, name, free);
                candidates.push((idx, layout, free));
            }
            Outcome::Pass { reason, free } => {
                record(Verdict::Passed, reason);
                if let Some(free) = free {
                    note_closest(&mut closest, name, free);
                }
            }
        }
    }

    if let Some((name, host, layout)) = chosen {
        return Ok(plan(name, host, layout, false, considered));
    }

    // Fallback: the candidate with the most free GPUs; `max_by_key` keeps the last maximum, so
    // iterate in reverse to let the earlier host win ties.
    let best = candidates.iter().enumerate().rev().max_by_key(|(_, (_, _, free))| *free).map(|(pos, _)| pos);
    if let Some(pos) = best {
        for (i, (idx, _, _)) in candidates.iter().enumerate() {
            considered[*idx].verdict = if i == pos { Verdict::Chosen } else { Verdict::Eligible };
        }
        let (best_idx, mut layout, _) = candidates.swap_remove(pos);
        let name = considered[best_idx].host.clone();
        let host = &config.hosts[name.as_str()];
        layout.notes.insert(0, host.queued_note(&request.to_string(), &name));
        return Ok(plan(name, host, layout, true, considered));
    }

    let looked_at: Vec<&Consideration> = considered.iter().filter(|c| c.verdict != Verdict::Filtered).collect();
    let summary = if looked_at.is_empty() {
        "every host was filtered out".to_owned()
    } else if let Some((host, free)) = &closest {
        format!("no host has {request}; largest fit: {host} with {free} free")
    } else if let [only] = looked_at.as_slice() {
        // One host was left (`--host`, or one of its kind): its own reason is the answer (e.g.
        // the probe's failure naming the missing credentials), not a bare "no host".
        format!("{}: {}", only.host, only.reason)
    } else {
        format!("no host can serve {request}")
    };
    let hints = hints::hints(config, request, &want, &considered, availability, closest.as_ref());
    Err(SolveError { hints, ..fail(summary, considered) })
}

static NOT_CHECKED: Availability = Availability::NotChecked;

fn filter_reason(request: &Request, name: &str, host: &HostConfig) -> Option<String> {
    let cluster = host.cluster();
    if let Some(wanted) = &request.host
        && wanted != name
    {
        return Some(format!("not the requested host {wanted}"));
    }
    if request.forbidden_clusters.iter().any(|c| c == cluster) {
        return Some(format!("cluster {cluster} is forbidden"));
    }
    if !request.preferred_clusters.is_empty() && !request.preferred_clusters.iter().any(|c| c == cluster) {
        return Some(format!(
            "cluster {cluster} not in preferred clusters ({})",
            request.preferred_clusters.join(", ")
        ));
    }
    None
}

fn unknown_host(config: &DispatchConfig, name: &str) -> String {
    let best = config
        .hosts
        .keys()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .filter(|(score, _)| *score >= 0.8);
    match best {
        Some((_, k)) => format!("unknown host {name} (did you mean {k}?)"),
        None => format!(
            "unknown host {name} (known hosts: {})",
            config.hosts.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn note_closest(closest: &mut Option<(String, u32)>, host: &str, free: u32) {
    if free > 0 && closest.as_ref().is_none_or(|(_, best)| free > *best) {
        *closest = Some((host.to_owned(), free));
    }
}

fn plan(name: String, host: &HostConfig, layout: Layout, queued: bool, considered: Vec<Consideration>) -> Plan {
    let total_chips = layout.total_chips();
    let mut notes = layout.notes;
    notes.extend(host.plan_notes(&name));
    Plan {
        host: name,
        kind: host.kind(),
        cluster: host.cluster().to_owned(),
        chip: layout.chip,
        nodes: layout.nodes,
        chips_per_node: layout.chips_per_node,
        processes_per_node: layout.processes_per_node,
        total_chips,
        placement: layout.placement,
        placement_text: layout.placement_text,
        queued,
        notes,
        considered,
    }
}
