//! Expansion of Slurm host lists such as `node[01-03,07],gpu5,a[1-2]-b`.

use thiserror::Error;

/// A host list that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NodeListError {
    /// A `[` without its `]`, a `]` without its `[`, or a nested `[`.
    #[error("unbalanced brackets in host list `{0}`")]
    Unbalanced(String),
    /// A range inside brackets that is empty, not numeric or runs backwards.
    #[error("invalid range `{range}` in host list `{list}`")]
    BadRange {
        /// The offending range.
        range: String,
        /// The whole list.
        list: String,
    },
}

/// Upper bound on the hosts one list may expand to, so a typo like `n[0-999999999]` cannot
/// exhaust memory.
const MAX_HOSTS: usize = 100_000;

/// Expands a Slurm host list into host names, in order. Zero padding of the range start is kept
/// (`n[08-10]` gives `n08 n09 n10`). Several bracket groups in one name form their product
/// (`r[1-2]n[1-2]`). `(null)` and the empty string give no hosts.
pub fn expand(list: &str) -> Result<Vec<String>, NodeListError> {
    let list = list.trim();
    if list.is_empty() || list == "(null)" {
        return Ok(Vec::new());
    }
    let mut hosts = Vec::new();
    for item in split_top_level(list)? {
        if item.is_empty() {
            continue;
        }
        expand_one(item, list, &mut hosts)?;
    }
    Ok(hosts)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, NodeListError> {
    let mut items = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(NodeListError::Unbalanced(list.to_owned())),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(NodeListError::Unbalanced(list.to_owned()));
    }
    items.push(&list[start..]);
    Ok(items)
}

/// Expands one comma-free item (`a[1-2]-b[3,5]`) and appends its names to `out`.
fn expand_one(item: &str, list: &str, out: &mut Vec<String>) -> Result<(), NodeListError> {
    let Some(open) = item.find('[') else {
        out.push(item.to_owned());
        return Ok(());
    };
    // split_top_level guarantees a matching `]` after every `[`.
    let close = open + item[open..].find(']').ok_or_else(|| NodeListError::Unbalanced(list.to_owned()))?;
    let prefix = &item[..open];
    let body = &item[open + 1..close];
    let rest = &item[close + 1..];
    let mut tails = Vec::new();
    expand_one(rest, list, &mut tails)?;
    for part in body.split(',') {
        for number in expand_range(part, list)? {
            for tail in &tails {
                if out.len() >= MAX_HOSTS {
                    return Err(NodeListError::BadRange { range: body.to_owned(), list: list.to_owned() });
                }
                out.push(format!("{prefix}{number}{tail}"));
            }
        }
    }
    Ok(())
}

/// `07` gives `["07"]`; `08-10` gives `["08", "09", "10"]`.
fn expand_range(part: &str, list: &str) -> Result<Vec<String>, NodeListError> {
    let bad = || NodeListError::BadRange { range: part.to_owned(), list: list.to_owned() };
    let (lo, hi) = part.split_once('-').unwrap_or((part, part));
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !numeric(lo) || !numeric(hi) {
        return Err(bad());
    }
    let width = lo.len();
    let (start, end): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
    if end < start || end - start >= MAX_HOSTS as u64 {
        return Err(bad());
    }
    Ok((start..=end).map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(list: &str, want: &[&str]) {
        assert_eq!(expand(list).unwrap(), want, "{list}");
    }

    #[test]
    fn expands_lists() {
        check("", &[]);
        check("(null)", &[]);
        check("  ", &[]);
        check("gpu5", &["gpu5"]);
        check("localhost", &["localhost"]);
        check("node[01-03,07],gpu5,a[1-2]-b", &["node01", "node02", "node03", "node07", "gpu5", "a1-b", "a2-b"]);
        check("n[08-11]", &["n08", "n09", "n10", "n11"]);
        check("n[8-11]", &["n8", "n9", "n10", "n11"]);
        check("n[098-101]", &["n098", "n099", "n100", "n101"]);
        check("r[1-2]n[1,3]", &["r1n1", "r1n3", "r2n1", "r2n3"]);
        check("a100-80gb-[1-2]", &["a100-80gb-1", "a100-80gb-2"]);
        check("x,,y", &["x", "y"]);
        check("[1-2]", &["1", "2"]);
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in
            ["node[01-03", "node01]", "n[[1]]", "n[1-2]]", "n[]", "n[a-b]", "n[3-1]", "n[1-]", "n[0-99999999999]"]
        {
            assert!(expand(bad).is_err(), "{bad} should fail");
        }
        assert_eq!(expand("n[1").unwrap_err().to_string(), "unbalanced brackets in host list `n[1`");
    }
}
