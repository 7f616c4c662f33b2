//! The code manifest of a run dir: per path, the object or link target it holds. Written into
//! every run dir at shipping, read back by `sync` to find what changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::archive::ExtraFile;
use super::plan::{PlanEntry, StorePlan};

/// The manifest of a run dir's shipped code, relative to the run dir.
pub const MANIFEST: &str = ".theseus/code-manifest.json";

/// What a run dir's code is: per path, `obj:<key>` or `link:<target>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The files.
    pub files: BTreeMap<String, String>,
}

impl Manifest {
    /// The manifest of `plan`.
    pub fn of(plan: &StorePlan) -> Manifest {
        let files = plan
            .files
            .iter()
            .map(|(path, entry)| {
                let value = match entry {
                    PlanEntry::Object(key) => format!("obj:{key}"),
                    PlanEntry::Symlink(target) => format!("link:{target}"),
                };
                (path.clone(), value)
            })
            .collect();
        Manifest { files }
    }

    /// As the per-run file written into the run dir.
    pub fn file(&self) -> ExtraFile {
        let mut contents = serde_json::to_vec(self).expect("a manifest serializes");
        contents.push(b'\n');
        ExtraFile { path: MANIFEST.into(), contents, mode: 0o644 }
    }
}
