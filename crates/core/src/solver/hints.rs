//! `hint:` lines for a request no host can serve, built from what the solver looked at: what to
//! change so that the next try works (uv's style). Pure: config, request, verdicts and
//! availability in, sentences out.

use std::collections::{BTreeMap, BTreeSet};

use super::{Consideration, Request, Verdict, Want};
use crate::availability::Availability;
use crate::chips::Chip;
use crate::config::{DispatchConfig, Gpus, HostConfig, HostKind};

/// Hints for a failed solve, most useful first. `closest` is the host that came closest and how
/// many chips (or CPUs) it has free.
pub(super) fn hints(
    config: &DispatchConfig,
    request: &Request,
    want: &Want,
    considered: &[Consideration],
    availability: &BTreeMap<String, Availability>,
    closest: Option<&(String, u32)>,
) -> Vec<String> {
    let mut hints = Vec::new();
    let looked_at: Vec<(&Consideration, &HostConfig)> = considered
        .iter()
        .filter(|c| c.verdict != Verdict::Filtered)
        .filter_map(|c| config.hosts.get(c.host.as_str()).map(|h| (c, h)))
        .collect();
    if looked_at.is_empty() && !considered.is_empty() {
        hints.push(filtered_hint(request));
    }
    if let Want::Gpu { chip, .. } = want {
        let with_gpus: Vec<&(&Consideration, &HostConfig)> = looked_at.iter().filter(|(_, h)| has_gpus(h)).collect();
        if with_gpus.is_empty() && !looked_at.is_empty() {
            let only_local = looked_at.iter().all(|(_, h)| h.kind() == HostKind::LOCAL);
            hints.push(if only_local {
                "this machine has no GPUs: add `--chip cpu` or `request: {chip: cpu}` to run on its CPUs".to_owned()
            } else {
                "no host in the config has GPUs: add `--chip cpu` or `request: {chip: cpu}` to run on CPUs, \
                 or add a GPU host to ~/.theseus.yaml"
                    .to_owned()
            });
            // Hosts of other accelerators (TPUs) take only requests that name their chip.
            let others = accelerators_offered(&looked_at);
            if let Some((chip, _)) = others.first() {
                let list: Vec<String> = others.iter().map(|(name, host)| format!("{name} on {host}")).collect();
                hints.push(format!("the config has {}: ask for it with `--chip {chip}`", list.join(", ")));
            }
        } else if let Some(chip) = chip {
            // A host whose GPUs are not listed may have any GPU: then nothing can be said.
            let all_listed = with_gpus.iter().all(|(_, h)| matches!(h.gpus(), Gpus::Listed(_)));
            let offered = chips_offered(&with_gpus);
            if all_listed && !offered.is_empty() && !offered.iter().any(|(name, _)| name == chip.name) {
                let list: Vec<String> = offered.iter().map(|(name, host)| format!("{name} on {host}")).collect();
                hints.push(format!(
                    "no host has {} GPUs; the config has {}: ask for one of those with `--chip`",
                    chip.name,
                    list.join(", ")
                ));
            }
        }
    }
    if let Want::Accelerator { chip, .. } = want
        && !looked_at.is_empty()
        && let Some(hint) = accelerator_hint(chip, &looked_at)
    {
        hints.push(hint);
    }
    if let Some((host, free)) = closest
        && *free > 0
    {
        let what = match want {
            Want::Cpu { .. } => format!("{free} processes"),
            Want::Gpu { chip: Some(chip), .. } => format!("{free} x {}", chip.name),
            Want::Gpu { chip: None, .. } => format!("{free} x any-gpu"),
            Want::Accelerator { chip, .. } => format!("{free} x {}", chip.name),
        };
        hints.push(format!("largest fit is {what} on {host}: `-n {free}` runs now"));
    }
    // With one host looked at and nothing free, the error is that host's reason already.
    let said = looked_at.len() == 1 && closest.is_none();
    for (c, _) in looked_at.iter().filter(|_| !said) {
        if let Some(Availability::Unknown { reason }) = availability.get(&c.host) {
            // A probe that answered with an error (a bad zone, a refused login) has its own
            // reason in the table; one that timed out did not answer.
            hints.push(if reason.starts_with("probe failed") {
                format!("host {}'s probe failed (its reason is above), so it was not used", c.host)
            } else {
                format!("host {} did not answer its probe, so it was not used (see `-v`)", c.host)
            });
        }
    }
    hints
}

/// The accelerators other than GPUs that `looked_at` offer (`(chip, host)`, sorted).
fn accelerators_offered<'a>(looked_at: &[(&'a Consideration, &HostConfig)]) -> Vec<(&'static str, &'a str)> {
    let mut offered = BTreeSet::new();
    for (c, host) in looked_at {
        for (chip, n) in host.accelerators() {
            if n > 0 {
                offered.insert((chip.name, c.host.as_str()));
            }
        }
    }
    offered.into_iter().collect()
}

/// When no host looked at offers `chip` (a non-GPU accelerator): what the config has instead.
fn accelerator_hint(chip: &Chip, looked_at: &[(&Consideration, &HostConfig)]) -> Option<String> {
    let offered = accelerators_offered(looked_at);
    if offered.iter().any(|(name, _)| *name == chip.name) {
        return None;
    }
    if offered.is_empty() {
        return Some(format!("no host offers {chip}: add a host that has {chip} chips to ~/.theseus.yaml"));
    }
    let list: Vec<String> = offered.iter().map(|(name, host)| format!("{name} on {host}")).collect();
    Some(format!("no host offers {chip}; the config has {}: ask for one of those with `--chip`", list.join(", ")))
}

/// Every host was filtered out before looking at its capacity.
fn filtered_hint(request: &Request) -> String {
    let mut flags = Vec::new();
    if request.host.is_some() {
        flags.push("`--host`");
    }
    if !request.preferred_clusters.is_empty() {
        flags.push("`--cluster`");
    }
    if !request.forbidden_clusters.is_empty() {
        flags.push("`--exclude-cluster`");
    }
    if flags.is_empty() {
        "every host was filtered out; `theseus plan` shows each host with its reason".to_owned()
    } else {
        format!("every host was filtered out by {}; loosen it (`theseus plan` shows each host)", flags.join(" and "))
    }
}

/// Whether a host can run GPU jobs at all (a `chips` map with a GPU, or GPUs not listed).
fn has_gpus(host: &HostConfig) -> bool {
    match host.gpus() {
        Gpus::Listed(chips) => chips.values().any(|&n| n > 0),
        Gpus::Unlisted => true,
    }
}

/// The GPU chips configured on `hosts` (`(chip, host)`, sorted, hosts without a chips map left out).
fn chips_offered(hosts: &[&(&Consideration, &HostConfig)]) -> BTreeSet<(String, String)> {
    let mut offered = BTreeSet::new();
    for (c, host) in hosts {
        let Gpus::Listed(chips) = host.gpus() else { continue };
        for (name, _) in chips.iter().filter(|(_, n)| **n > 0) {
            offered.insert((name.clone(), c.host.clone()));
        }
    }
    offered
}
