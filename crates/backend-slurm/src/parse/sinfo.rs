//! `sinfo` node listings → [`PartitionReport`]: GPUs configured and allocated per node and
//! partition, and whether each node can take jobs.

use theseus_core::availability::{NodeAvailability, PartitionAvailability, PartitionReport};

use super::ParseError;
use crate::nodelist;

/// The command whose output [`parse`] reads: one line per (node, partition) with `|` after each
/// field. `-O` is needed because GresUsed has no `-o` letter; a size of 0 (empty) asks for no
/// fixed width, and [`parse`] trims padding anyway.
pub const SINFO_COMMAND: &str =
    "sinfo --Node --noheader --Format='NodeList:|,Partition:|,Gres:|,GresUsed:|,StateCompact:'";

/// Parses [`SINFO_COMMAND`] output. `free` counts only GPUs a job could get now: it is 0 on
/// unusable and fully allocated (`alloc`) nodes. Partitions and nodes keep the order of their first line; a
/// node listed in several partitions appears in each. Blank lines are skipped.
pub fn parse(output: &str) -> Result<PartitionReport, ParseError> {
    let mut avail = PartitionReport::default();
    for (idx, raw) in output.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |problem: &str| ParseError::line("sinfo", idx + 1, raw, problem);
        let mut fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.len() == 6 && fields[5].is_empty() {
            fields.pop();
        }
        let [nodes, partitions, gres, gres_used, state] = fields[..] else {
            return Err(err("expected 5 `|`-separated fields"));
        };
        let names = nodelist::expand(nodes).map_err(|e| err(&e.to_string()))?;
        if names.is_empty() {
            return Err(err("no node name"));
        }
        let configured = parse_gres(gres).map_err(|p| err(&p))?;
        let (usable, allocatable) = node_state(state).ok_or_else(|| err("unknown node state"))?;
        let (gpu_type, total) = match configured {
            Some((ty, n)) => (ty, n),
            None => (None, 0),
        };
        let used = used_gpus(gres_used, gpu_type.as_deref()).map_err(|p| err(&p))?;
        // Free means "can be had now": an unusable node offers none, and a fully allocated node
        // has no CPUs left, so its idle GPUs cannot be had either.
        let free = if allocatable { total.saturating_sub(used) } else { 0 };
        for partition in partitions.split(',').map(|p| p.trim().trim_end_matches('*')).filter(|p| !p.is_empty()) {
            let part = match avail.partitions.iter().position(|p| p.name == partition) {
                Some(i) => &mut avail.partitions[i],
                None => {
                    avail.partitions.push(PartitionAvailability { name: partition.to_owned(), nodes: Vec::new() });
                    avail.partitions.last_mut().expect("just pushed")
                }
            };
            for name in &names {
                if part.nodes.iter().any(|n| &n.name == name) {
                    continue;
                }
                part.nodes.push(NodeAvailability {
                    name: name.clone(),
                    gpu_type: gpu_type.clone(),
                    total,
                    free,
                    usable,
                });
            }
        }
    }
    Ok(avail)
}

/// The GPUs of a `Gres` field: `(type, count)` of the first `gpu` entry, with the counts of
/// later `gpu` entries of the same type added. `None` when the node has no GPU GRES.
fn parse_gres(field: &str) -> Result<Option<(Option<String>, u32)>, String> {
    let mut found: Option<(Option<String>, u32)> = None;
    for entry in gres_entries(field) {
        let Some((ty, n)) = gpu_entry(entry)? else { continue };
        match &mut found {
            None => found = Some((ty, n)),
            Some((first, total)) if *first == ty => *total += n,
            // A node with two GPU types: only the first is reported (NodeAvailability has one
            // type), so the solver never counts GPUs of another type towards a request.
            Some(_) => {}
        }
    }
    Ok(found)
}

/// GPUs allocated on a node, from its `GresUsed` field, counting entries of `gpu_type` (or all
/// GPU entries when the node's GRES is untyped).
fn used_gpus(field: &str, gpu_type: Option<&str>) -> Result<u32, String> {
    let mut used = 0;
    for entry in gres_entries(field) {
        let Some((ty, n)) = gpu_entry(entry)? else { continue };
        if gpu_type.is_none() || ty.is_none() || ty.as_deref() == gpu_type {
            used += n;
        }
    }
    Ok(used)
}

/// Splits a GRES list on the commas outside parentheses (`gpu:a:2(IDX:0,2),shard:0`), dropping
/// `(null)` and empty entries.
fn gres_entries(field: &str) -> Vec<&str> {
    let mut entries = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in field.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                entries.push(&field[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    entries.push(&field[start..]);
    entries.into_iter().map(str::trim).filter(|e| !e.is_empty() && *e != "(null)").collect()
}

/// One GRES entry: `gpu:h100:8(S:0-1)`, `gpu:8`, `gpu:(null):0(IDX:N/A)` → `Some((type, n))`;
/// other GRES names (`shard:8`) → `None`.
fn gpu_entry(entry: &str) -> Result<Option<(Option<String>, u32)>, String> {
    let entry = strip_trailing_group(entry);
    let mut parts = entry.split(':');
    if parts.next() != Some("gpu") {
        return Ok(None);
    }
    let rest: Vec<&str> = parts.collect();
    let (ty, count) = match rest[..] {
        [count] => (None, count),
        [ty, count] => (Some(ty), count),
        _ => return Err(format!("malformed GRES entry `{entry}`")),
    };
    let count: u32 = count.parse().map_err(|_| format!("bad GPU count in GRES entry `{entry}`"))?;
    let ty = ty.filter(|t| !t.is_empty() && *t != "(null)").map(str::to_owned);
    Ok(Some((ty, count)))
}

/// `gpu:h100:2(IDX:0-1)` → `gpu:h100:2`; leaves `gpu:(null):0` alone.
fn strip_trailing_group(entry: &str) -> &str {
    if entry.ends_with(')')
        && let Some(open) = entry.rfind('(')
        && open > 0
        && !entry[..open].ends_with(':')
    {
        return &entry[..open];
    }
    entry
}

/// `(usable, allocatable)` for a `StateCompact` value such as `mix`, `down*` or `idle~`; `None`
/// for a state this parser does not know. Unusable: down, drained or draining, failing,
/// maintenance, reserved (only jobs in the reservation may run), not responding (`*`), powering
/// down (`%`, `!`), maintenance reservation (`$`). Allocatable: usable and not fully allocated.
fn node_state(state: &str) -> Option<(bool, bool)> {
    let state = state.to_ascii_lowercase();
    let base = state.trim_end_matches(['*', '~', '#', '$', '@', '%', '!', '^', '-', '+']);
    let flags = &state[base.len()..];
    let base_usable = match base {
        "idle" | "mix" | "mixed" | "alloc" | "allocated" | "comp" | "completing" | "planned" | "plnd" | "boot"
        | "pow_up" => true,
        "down" | "drain" | "drained" | "drng" | "draining" | "fail" | "failg" | "failing" | "maint" | "resv"
        | "reserved" | "unk" | "unknown" | "inval" | "npc" | "futr" | "future" | "pow_dn" | "blocked" | "reboot"
        | "reboot^" => false,
        _ => return None,
    };
    let usable = base_usable && !flags.contains(['*', '$', '%', '!']);
    let allocatable = usable && !matches!(base, "alloc" | "allocated");
    Some((usable, allocatable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ty: Option<&str>, total: u32, free: u32, usable: bool) -> NodeAvailability {
        NodeAvailability { name: name.into(), gpu_type: ty.map(Into::into), total, free, usable }
    }

    fn fixture(name: &str) -> String {
        let path = format!("{}/test_data/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn lab_two_nodes() {
        let got = parse(&fixture("sinfo_lab_two_nodes.txt")).unwrap();
        assert_eq!(got.partitions.len(), 1);
        assert_eq!(got.partitions[0].name, "debug");
        assert_eq!(
            got.partitions[0].nodes,
            [node("node1", Some("h100"), 4, 2, true), node("node2", Some("h100"), 4, 4, true)]
        );
    }

    #[test]
    fn realistic_cluster() {
        let got = parse(&fixture("sinfo_cluster.txt")).unwrap();
        let names: Vec<_> = got.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["gpu", "h100", "interactive", "cpu"]);
        let a = Some("a100-80gb");
        assert_eq!(
            got.partitions[0].nodes,
            [
                node("a100-01", a, 8, 0, true),
                node("a100-02", a, 8, 5, true),
                node("a100-03", a, 8, 8, true),
                node("a100-04", a, 8, 0, false),
                node("a100-05", a, 8, 0, false),
                node("a100-06", a, 8, 0, false),
                node("h100-01", Some("h100"), 4, 2, true),
            ]
        );
        let h = Some("h100");
        assert_eq!(
            got.partitions[1].nodes,
            [
                node("h100-01", h, 4, 2, true),
                node("h100-02", h, 4, 4, true),
                node("h100-03", h, 4, 0, false),
                node("h100-04", h, 4, 0, false),
                node("h100-05", h, 4, 3, true),
                node("h100-06", h, 4, 4, true),
                node("h100-07", h, 4, 0, false),
            ]
        );
        assert_eq!(got.partitions[2].nodes, [node("l40-01", None, 8, 7, true), node("l40-02", None, 8, 8, true)]);
        assert_eq!(got.partitions[3].nodes, [node("cpu-01", None, 0, 0, true), node("cpu-02", None, 0, 0, true)]);
    }

    #[test]
    fn padded_fields_uppercase_state_and_dotted_types() {
        let got = parse(&fixture("sinfo_padded.txt")).unwrap();
        assert_eq!(got.partitions[0].name, "batch");
        assert_eq!(
            got.partitions[0].nodes,
            [node("gpu-node-01", Some("rtx.6000"), 2, 1, true), node("gpu-node-02", Some("rtx.6000"), 2, 2, true)]
        );
    }

    #[test]
    fn gres_entries_and_states() {
        assert_eq!(gpu_entry("gpu:h100:8(S:0-1)").unwrap(), Some((Some("h100".into()), 8)));
        assert_eq!(gpu_entry("gpu:8").unwrap(), Some((None, 8)));
        assert_eq!(gpu_entry("gpu:(null):0(IDX:N/A)").unwrap(), Some((None, 0)));
        assert_eq!(gpu_entry("shard:8").unwrap(), None);
        assert!(gpu_entry("gpu:h100:x").is_err());
        assert_eq!(parse_gres("gpu:a:2(IDX:0,2),gpu:b:4,gpu:a:1").unwrap(), Some((Some("a".into()), 3)));
        assert_eq!(used_gpus("gpu:a:2(IDX:0,3),gpu:b:4", Some("a")).unwrap(), 2);
        for (state, want) in [
            ("idle", Some((true, true))),
            ("mix-", Some((true, true))),
            ("alloc", Some((true, false))),
            ("idle*", Some((false, false))),
            ("drain*", Some((false, false))),
            ("idle%", Some((false, false))),
            ("MIXED", Some((true, true))),
            // Slurm 22.05's compact name of PLANNED (an idle node the backfill scheduler holds
            // for a pending job), seen on the lab while a job waited.
            ("plnd", Some((true, true))),
            ("weird", None),
        ] {
            assert_eq!(node_state(state), want, "{state}");
        }
    }

    #[test]
    fn empty_and_malformed_output() {
        assert_eq!(parse("").unwrap(), PartitionReport::default());
        assert_eq!(parse("\n  \n").unwrap(), PartitionReport::default());
        for bad in [
            "node1 debug* gpu:h100:8 gpu:h100:0 idle",
            "node1|debug*|gpu:h100:8|idle",
            "node1|debug*|gpu:h100:eight|gpu:0|idle",
            "node1|debug*|gpu:h100:8|gpu:0|sleepy",
            "node[1|debug*|gpu:8|gpu:0|idle",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.starts_with("failed to parse `sinfo` output line 1"), "{err}");
        }
    }
}
