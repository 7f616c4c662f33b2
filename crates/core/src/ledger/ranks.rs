//! Each run's last per-rank state ([`RankStatus`]: node or pod, state, exit code, restarts), kept
//! so that a run whose job its host no longer has (Volcano deletes a cancelled vcjob and collects
//! an ended one after its `ttlSecondsAfterFinished`) still shows how each rank ended. Written by
//! every lifecycle step that records a status with ranks, only when they changed (an unchanged
//! write would bump the dashboard's change mark).

use rusqlite::OptionalExtension;

use crate::Result;
use crate::backend::RankStatus;

use super::{Ledger, ledger_err};

impl Ledger {
    /// Keeps `ranks` as run `run_id`'s last per-rank state (nothing when empty or unchanged).
    pub fn set_ranks(&self, run_id: &str, ranks: &[RankStatus]) -> Result<()> {
        if self.read_only || ranks.is_empty() {
            return Ok(());
        }
        let text = serde_json::to_string(ranks).map_err(|e| crate::Error::Ledger {
            message: format!("cannot encode the ranks of run `{run_id}`"),
            source: Some(Box::new(e)),
        })?;
        self.conn
            .execute("UPDATE runs SET ranks = ?2 WHERE run_id = ?1 AND ranks IS NOT ?2", [run_id, text.as_str()])
            .map_err(ledger_err("cannot record the run's ranks"))?;
        Ok(())
    }

    /// The per-rank state [`Ledger::set_ranks`] kept last, when every rank had ended then (a
    /// rank last seen running says nothing true of an ended run); empty otherwise.
    pub fn ended_ranks(&self, run_id: &str) -> Result<Vec<RankStatus>> {
        let Ok(mut stmt) = self.conn.prepare("SELECT ranks FROM runs WHERE run_id = ?1") else {
            return Ok(Vec::new());
        };
        let text: Option<Option<String>> =
            stmt.query_row([run_id], |r| r.get(0)).optional().map_err(ledger_err("cannot read runs"))?;
        let ranks: Vec<RankStatus> = text.flatten().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        Ok(if ranks.iter().all(|r| r.state.is_terminal()) { ranks } else { Vec::new() })
    }
}
