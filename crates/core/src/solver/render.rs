//! Text renderings of the solver's answer: the table of hosts considered and a one-line plan.

use super::{Consideration, Plan, Verdict};

/// An aligned text table of `considered` with the columns HOST, TYPE, VERDICT and REASON.
/// Lines end without trailing spaces; the result ends with a newline.
pub fn render_table(considered: &[Consideration]) -> String {
    let header = ["HOST", "TYPE", "VERDICT", "REASON"];
    let rows: Vec<[String; 4]> = considered
        .iter()
        .map(|c| [c.host.clone(), c.kind.to_string(), verdict(c.verdict).to_owned(), c.reason.clone()])
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (idx, cell) in row.iter().enumerate() {
            if idx + 1 < row.len() {
                line.push_str(&format!("{cell:<width$}  ", width = widths[idx]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The plan in one line, e.g.
/// `k8s-a (volcano): 4 nodes x 8 h100 = 32 chips, 1 process per node`.
pub fn describe_plan(plan: &Plan) -> String {
    let mut out = format!("{} ({}): ", plan.host, plan.kind);
    let nodes = count(plan.nodes, "node", "nodes");
    if plan.chips_per_node == 0 {
        out.push_str(&format!("cpu-only, {nodes} x {}", count(plan.processes_per_node, "process", "processes")));
    } else {
        let chip = plan.chip.map_or("gpu", |c| c.name);
        out.push_str(&format!(
            "{nodes} x {} {chip} = {} chips, {} per node",
            plan.chips_per_node,
            plan.total_chips,
            count(plan.processes_per_node, "process", "processes")
        ));
    }
    out.push_str(&plan.placement_text);
    if plan.queued {
        out.push_str(", queued");
    }
    out
}

fn verdict(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Chosen => "chosen",
        Verdict::Eligible => "eligible",
        Verdict::Passed => "passed",
        Verdict::Filtered => "filtered",
    }
}

fn count(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
