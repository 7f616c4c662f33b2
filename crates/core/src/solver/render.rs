//! Text rendering of solver results (placeholder until the solver lands).

use super::{Consideration, Plan};

/// Table of considered hosts.
pub fn render_table(considered: &[Consideration]) -> String {
    considered.iter().map(|c| format!("{} {:?} {}\n", c.host, c.verdict, c.reason)).collect()
}

/// One line about a plan.
pub fn describe_plan(plan: &Plan) -> String {
    format!("{} ({})", plan.host, plan.kind)
}
