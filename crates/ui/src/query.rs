//! Query strings and path segments: percent-decoding, `key=value` pairs, and the
//! [`RunQuery`] of `GET /api/runs`.
//! Pure: no IO (checked by `cargo xtask tidy`).

use theseus_core::backend::JobState;

use crate::api::{MAX_PAGE, RunQuery};

/// The page size when the query names none.
pub(crate) const DEFAULT_PAGE: usize = 50;

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, as forms write query
/// values). A `%` not followed by two hex digits stays as it is; bytes that are not UTF-8 become
/// U+FFFD.
pub(crate) fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes[i] {
            b'%' => bytes.get(i + 1).and_then(|&h| hex(h)).zip(bytes.get(i + 2).and_then(|&l| hex(l))),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some((high, low)), _) => {
                out.push(high * 16 + low);
                i += 3;
                continue;
            }
            (None, b'+') if plus_is_space => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The decoded `key=value` pairs of a query string, in order (a key without `=` has an empty
/// value; empty pieces are skipped).
pub(crate) fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    let Some(query) = query else { return Vec::new() };
    query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            (percent_decode(key, true), percent_decode(value, true))
        })
        .collect()
}

/// The first value of `key` in `pairs`.
pub(crate) fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The [`RunQuery`] a query string asks for: empty values mean "no filter", `limit` defaults
/// to [`DEFAULT_PAGE`]; a bad number or state is an error naming the key and what it takes.
pub(crate) fn run_query(pairs: &[(String, String)]) -> Result<RunQuery, String> {
    let text = |key: &str| get(pairs, key).filter(|v| !v.is_empty()).map(str::to_owned);
    let offset = match text("offset") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("`offset` must be a whole number of rows to skip (0 or more), not `{v}`"))?,
    };
    let limit = match text("limit") {
        None => DEFAULT_PAGE,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => return Err(format!("`limit` must be a number of rows from 1 to {MAX_PAGE}, not `{v}`")),
        },
    };
    let state = text("state");
    if let Some(state) = &state
        && JobState::parse(state).is_none()
    {
        return Err(format!(
            "`state` must be one of submitting, pending, running, completed, failed, cancelled, preempted, \
             unknown (or empty for all), not `{state}`"
        ));
    }
    Ok(RunQuery {
        offset,
        limit: Some(limit),
        project: text("project"),
        group: text("group"),
        host: text("host"),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(q: &str) -> Result<RunQuery, String> {
        run_query(&pairs(Some(q)))
    }

    #[test]
    fn decodes_escapes_and_plus() {
        assert_eq!(percent_decode("a%20b+c%2Fd", true), "a b c/d");
        assert_eq!(percent_decode("a+b", false), "a+b");
        assert_eq!(percent_decode("%e2%9C%93", false), "\u{2713}");
        // Not an escape: kept as written.
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
        assert_eq!(percent_decode("%ff", false), "\u{fffd}");
    }

    #[test]
    fn pairs_in_order_with_empty_values() {
        let p = pairs(Some("a=1&&b&c=x%3Dy&a=2"));
        assert_eq!(
            p,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "".into()),
                ("c".into(), "x=y".into()),
                ("a".into(), "2".into())
            ]
        );
        assert_eq!(get(&p, "a"), Some("1"));
        assert_eq!(get(&p, "z"), None);
        assert!(pairs(None).is_empty());
    }

    #[test]
    fn run_query_defaults_and_filters() {
        let q = query("").unwrap();
        assert_eq!(q, RunQuery { limit: Some(DEFAULT_PAGE), ..RunQuery::default() });
        let q = query("offset=100&limit=500&project=p+1&group=&host=gpu%2Dbox&state=running&token=x").unwrap();
        assert_eq!(q.offset, 100);
        assert_eq!(q.limit, Some(500));
        assert_eq!(q.project.as_deref(), Some("p 1"));
        assert_eq!(q.group, None);
        assert_eq!(q.host.as_deref(), Some("gpu-box"));
        assert_eq!(q.state.as_deref(), Some("running"));
        assert_eq!(query("limit=&state=").unwrap().limit, Some(DEFAULT_PAGE));
    }

    #[test]
    fn run_query_refuses_bad_values() {
        for bad in ["limit=0", "limit=501", "limit=-1", "limit=ten", "offset=-3", "offset=x", "state=runing"] {
            let err = query(bad).unwrap_err();
            let key = bad.split('=').next().unwrap();
            assert!(err.contains(&format!("`{key}`")), "{bad}: {err}");
        }
    }
}
