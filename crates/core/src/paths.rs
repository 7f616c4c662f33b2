//! Pure checks of cluster paths (text, as seen on the cluster's machines; no IO): that a
//! configured path is absolute and normalised, and that every path a backend's layout makes
//! stays under its root.
//!
//! Names that become path parts are already restricted by [`crate::job::validate_name`]; the
//! layout check is the second line of defence, made where the paths are made, so that no
//! future name, setting or code path can write outside a cluster's dirs.

use std::path::{Component, Path};

/// Checks that `path` is absolute (`/…`, or `~`/`~/…` which the backends expand to a home dir)
/// and normalised: no `.` or `..` component, no empty component (`//`), not empty.
///
/// # Errors
/// What is wrong, without the path (the caller names the key).
pub fn check_cluster_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path; give an absolute path such as /data/theseus".into());
    }
    let rest = if path == "~" {
        ""
    } else if let Some(rest) = path.strip_prefix("~/") {
        rest
    } else if let Some(rest) = path.strip_prefix('/') {
        rest
    } else {
        return Err("not an absolute path; start it with `/` (or `~/` for the home dir)".into());
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Ok(());
    }
    for part in rest.split('/') {
        match part {
            "" => return Err("not normalised: it has an empty component (`//`)".into()),
            "." | ".." => return Err(format!("not normalised: it has a `{part}` component")),
            _ => {}
        }
    }
    Ok(())
}

/// Checks that `path` lies under `root` (or is `root`): both are normalised lexically first
/// (`.` and repeated `/` dropped), `path` must have no `..` component, and the components of
/// `root` must be a prefix of those of `path`.
///
/// # Errors
/// A message naming both paths.
pub fn check_under(root: &str, path: &str) -> Result<(), String> {
    let outside = |why: &str| Err(format!("path `{path}` is not under `{root}`: {why}"));
    let parts = |p: &str| -> Option<Vec<String>> {
        let mut out = Vec::new();
        for c in Path::new(p).components() {
            match c {
                Component::RootDir => out.push("/".to_owned()),
                Component::CurDir => {}
                Component::ParentDir => return None,
                Component::Prefix(_) => return None,
                Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            }
        }
        Some(out)
    };
    if root.is_empty() {
        return outside("the root is empty");
    }
    let Some(root_parts) = parts(root) else {
        return outside("the root has a `..` component");
    };
    let Some(path_parts) = parts(path) else {
        return outside("it has a `..` component");
    };
    if path_parts.len() < root_parts.len() || path_parts[..root_parts.len()] != root_parts[..] {
        return outside("it leaves the root");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_paths_are_absolute_and_normalised() {
        for good in ["/", "/data", "/data/theseus/", "~", "~/", "~/.local/share/theseus", "/a/.b/c..d"] {
            assert_eq!(check_cluster_path(good), Ok(()), "{good:?}");
        }
        assert!(check_cluster_path("").unwrap_err().contains("empty path"));
        assert!(check_cluster_path("relative/dir").unwrap_err().contains("not an absolute path"));
        assert!(check_cluster_path("~user/x").unwrap_err().contains("not an absolute path"));
        assert!(check_cluster_path("/a/../b").unwrap_err().contains("`..`"));
        assert!(check_cluster_path("/a/./b").unwrap_err().contains("`.`"));
        assert!(check_cluster_path("/a//b").unwrap_err().contains("empty component"));
        assert!(check_cluster_path("~/..").unwrap_err().contains("`..`"));
    }

    #[test]
    fn paths_under_their_root_pass_and_others_fail() {
        assert_eq!(check_under("/w", "/w/p/g/n/r"), Ok(()));
        assert_eq!(check_under("/w/", "/w//p/./g"), Ok(()));
        assert_eq!(check_under("/w", "/w"), Ok(()));
        assert_eq!(check_under("/", "/anything"), Ok(()));
        let err =
            check_under("/home/u/.local/share/theseus/work", "/home/u/.local/share/theseus/work/../../../../tmp/x")
                .unwrap_err();
        assert!(err.contains("`..`") && err.contains("/tmp/x"), "{err}");
        assert!(check_under("/w", "/w2/x").unwrap_err().contains("leaves the root"));
        assert!(check_under("/w/a", "/w").unwrap_err().contains("leaves the root"));
        assert!(check_under("/w", "x/y").unwrap_err().contains("leaves the root"));
        assert!(check_under("", "/w").is_err());
        assert!(check_under("/w/../x", "/w/../x/y").is_err());
    }
}
