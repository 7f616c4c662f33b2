//! An ended run's own files (`metadata.json`, `checkpoints.json`, `batch-search.json`) as it
//! left them in its status dir on the PVC, for
//! [`theseus_core::backend::Backend::ended_run_files`]: a live run's are read in rank 0's pod,
//! an ended run has none, so a short-lived helper pod that mounts the PVC runs [`READ_FILES`]
//! (`backend/gone.rs`). This module is pure: the script and [`parse_files`], which reads its
//! length-framed output (binary-safe: a file's bytes are never scanned for a separator).

/// Prints, for each name after `dir` and `limit`, a header line `==> NAME SIZE` and then exactly
/// `SIZE` bytes of the file; `==> NAME -` when the file is not there, `==> NAME big SIZE` when it
/// is larger than `limit` (its bytes are not sent). Busybox `sh`, `wc`, `head`.
pub(crate) const READ_FILES: &str = r#"set -u
dir=$1 limit=$2
shift 2
for name in "$@"; do
  f=$dir/$name
  if [ ! -f "$f" ]; then
    printf '==> %s -\n' "$name"
    continue
  fi
  size=$(wc -c < "$f")
  size=$((size + 0))
  if [ "$size" -gt "$limit" ]; then
    printf '==> %s big %s\n' "$name" "$size"
    continue
  fi
  printf '==> %s %s\n' "$name" "$size"
  head -c "$size" -- "$f"
done
"#;

/// Why [`READ_FILES`]'s output could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FramingError {
    /// A header line was not where one should be, or did not name the file asked for.
    #[error("expected the header of `{name}`, found {found:?}")]
    Header { name: String, found: String },
    /// The output ended inside a file (it changed size while it was read).
    #[error("`{name}` ended after {got} of its {size} bytes")]
    Short { name: String, size: usize, got: usize },
}

/// The files of [`READ_FILES`]'s output `out`, one per name of `names`, in order: `None` for
/// a file not there or too large.
pub(crate) fn parse_files(out: &[u8], names: &[&str]) -> Result<Vec<Option<Vec<u8>>>, FramingError> {
    let mut rest = out;
    let mut files = Vec::with_capacity(names.len());
    for &name in names {
        let (line, after) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => (&rest[..end], &rest[end + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let header = |found: &[u8]| FramingError::Header {
            name: name.to_owned(),
            found: String::from_utf8_lossy(&found[..found.len().min(80)]).into_owned(),
        };
        let text = std::str::from_utf8(line).map_err(|_| header(line))?;
        let said = text.strip_prefix("==> ").and_then(|t| t.strip_prefix(name)).and_then(|t| t.strip_prefix(' '));
        match said {
            Some("-") => files.push(None),
            Some(big) if big.starts_with("big ") => files.push(None),
            Some(size) => {
                let size: usize = size.parse().map_err(|_| header(line))?;
                if after.len() < size {
                    return Err(FramingError::Short { name: name.to_owned(), size, got: after.len() });
                }
                files.push(Some(after[..size].to_vec()));
                rest = &after[size..];
                continue;
            }
            None => return Err(header(line)),
        }
        rest = after;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &std::path::Path, limit: &str, names: &[&str]) -> Vec<u8> {
        let out = std::process::Command::new("sh")
            .args(["-c", READ_FILES, "theseus-store", dir.to_str().unwrap(), limit])
            .args(names)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    #[test]
    fn the_script_frames_each_file_by_its_length() {
        let dir = tempfile::tempdir().unwrap();
        // A file whose bytes look like a header, one with no final newline, one too large.
        std::fs::write(dir.path().join("metadata.json"), "{\"a\": 1}\n==> checkpoints.json 3\nxyz").unwrap();
        std::fs::write(dir.path().join("checkpoints.json"), "{\"latest\": \"step_9\"}").unwrap();
        std::fs::write(dir.path().join("batch-search.json"), vec![b'x'; 40]).unwrap();
        let names = ["metadata.json", "nothing.json", "checkpoints.json", "batch-search.json"];
        let files = parse_files(&run(dir.path(), "36", &names), &names).unwrap();
        assert_eq!(files[0].as_deref(), Some(&b"{\"a\": 1}\n==> checkpoints.json 3\nxyz"[..]));
        assert_eq!(files[1], None);
        assert_eq!(files[2].as_deref(), Some(&b"{\"latest\": \"step_9\"}"[..]));
        assert_eq!(files[3], None, "larger than the limit");
        // An empty file is a file.
        std::fs::write(dir.path().join("empty.json"), "").unwrap();
        assert_eq!(parse_files(&run(dir.path(), "32", &["empty.json"]), &["empty.json"]).unwrap(), vec![Some(vec![])]);
        // No run dir at all: every file is missing.
        let gone = dir.path().join("never");
        assert_eq!(parse_files(&run(&gone, "36", &names), &names).unwrap(), vec![None; 4]);
    }

    #[test]
    fn output_that_is_not_the_framing_is_an_error() {
        let names = ["metadata.json"];
        assert!(matches!(parse_files(b"", &names), Err(FramingError::Header { .. })));
        assert!(matches!(parse_files(b"==> other.json 2\n{}", &names), Err(FramingError::Header { .. })));
        assert!(matches!(parse_files(b"==> metadata.json x\n", &names), Err(FramingError::Header { .. })));
        assert_eq!(
            parse_files(b"==> metadata.json 10\n{}", &names),
            Err(FramingError::Short { name: "metadata.json".into(), size: 10, got: 2 })
        );
        assert_eq!(parse_files(b"==> metadata.json big 99\n", &names), Ok(vec![None]));
    }
}
