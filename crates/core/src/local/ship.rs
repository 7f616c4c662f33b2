//! Shipping a local run's code through the cluster's content-addressed store
//! ([`crate::store`]) under its work root, done in-process ([`store::ship_local`]): the run dir
//! is built under `<run>.partial` and renamed when complete; an interrupt stops the ship at the
//! next file and leaves neither.

use std::path::Path;

use crate::backend::{PreparedJob, SubmitOptions};
use crate::store::{self, ExtraFile, Materialize, ShipRequest};
use crate::{Error, Result};

/// Ships `job`'s code into `work_dir` through the store of the work root `root`, and reports
/// what it sent through `options`.
pub(super) async fn ship(
    job: &PreparedJob,
    root: &Path,
    work_dir: &Path,
    mode: Materialize,
    options: &SubmitOptions,
) -> Result<()> {
    let parent = work_dir.parent().ok_or_else(|| Error::InvalidConfig("work dir has no parent".into()))?;
    tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io("create", parent, e))?;
    let request = ShipRequest {
        snapshot: job.snapshot.clone(),
        root: super::path_str(root)?,
        dest: super::path_str(work_dir)?,
        mode,
        extra: ExtraFile::bootstrap(&job.bootstrap),
        progress: options.progress.clone(),
        status: options.status.clone(),
    };
    let report = store::ship_local(request).await?;
    options.report_shipped(&report);
    Ok(())
}
