//! Reading the contents of a snapshot's files, one at a time, from the working tree or from
//! the snapshot's commit: what both the tar writer of a full ship and the store's object
//! archive read.

use std::io::Read;

use super::{Snapshot, SnapshotFile, SnapshotSource, git};
use crate::{Error, Result};

/// What [`Snapshot::for_each_content`] calls: index, file, current size, content.
pub type ContentVisitor<'a> = dyn FnMut(usize, &SnapshotFile, u64, &mut dyn Read) -> Result<()> + 'a;

impl Snapshot {
    /// Calls `visit` with the index, the file, its current size and a reader of its content,
    /// for each regular file of `indices` (symlinks are skipped), in the order given.
    /// Working-tree files are read as they are now; one that is no longer a regular file, or
    /// disappeared, is an error naming it.
    pub fn for_each_content(&self, indices: &[usize], visit: &mut ContentVisitor<'_>) -> Result<()> {
        match &self.source {
            SnapshotSource::GitCommit { commit } => {
                let ids = git::blob_ids(&self.root, commit)?;
                let mut blobs = git::BlobReader::start(&self.root)?;
                for &i in indices {
                    let file = &self.files[i];
                    if file.symlink.is_some() {
                        continue;
                    }
                    let oid = ids
                        .get(&file.path)
                        .ok_or_else(|| Error::NotFound { what: format!("`{}` in commit {commit}", file.path) })?;
                    {
                        let (size, mut reader) = blobs.open(oid)?;
                        visit(i, file, size, &mut reader)?;
                        // The next blob starts after this one's last byte.
                        std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| Error::Command {
                            command: "git cat-file --batch".into(),
                            message: e.to_string(),
                        })?;
                    }
                    blobs.finish_blob()?;
                }
            }
            SnapshotSource::GitWorktree | SnapshotSource::Directory => {
                for &i in indices {
                    let file = &self.files[i];
                    if file.symlink.is_some() {
                        continue;
                    }
                    let full = self.root.join(&file.path);
                    let meta = std::fs::symlink_metadata(&full).map_err(|e| Error::io("read", &full, e))?;
                    if !meta.is_file() {
                        return Err(Error::InvalidConfig(format!(
                            "cannot ship `{}`: not a regular file any more",
                            full.display()
                        )));
                    }
                    let mut handle = std::fs::File::open(&full).map_err(|e| Error::io("read", &full, e))?;
                    visit(i, file, meta.len(), &mut handle)?;
                }
            }
        }
        Ok(())
    }
}
