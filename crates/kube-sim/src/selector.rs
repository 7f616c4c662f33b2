//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`) and field selectors
//! (`=`, `==`, `!=` on any dotted path, e.g. `metadata.name`, `involvedObject.name`).

use serde_json::Value;

use crate::status::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub(crate) fn parse(input: &str) -> Result<Self, ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("unable to parse requirement: {why} in `{input}`"));
        let mut reqs = Vec::new();
        for term in split_terms(input) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            if let Some(key) = term.strip_prefix('!') {
                reqs.push(Requirement::NotExists(check_key(key.trim()).map_err(|_| bad("invalid key"))?));
            } else if let Some((key, value)) = term.split_once("!=") {
                reqs.push(Requirement::NotEquals(
                    check_key(key.trim()).map_err(|_| bad("invalid key"))?,
                    value.trim().to_owned(),
                ));
            } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                reqs.push(Requirement::Equals(
                    check_key(key.trim()).map_err(|_| bad("invalid key"))?,
                    value.trim().to_owned(),
                ));
            } else if let Some((key, set)) = split_set_op(term, " notin ") {
                reqs.push(Requirement::NotIn(
                    check_key(key).map_err(|_| bad("invalid key"))?,
                    parse_set(set).ok_or_else(|| bad("bad set"))?,
                ));
            } else if let Some((key, set)) = split_set_op(term, " in ") {
                reqs.push(Requirement::In(
                    check_key(key).map_err(|_| bad("invalid key"))?,
                    parse_set(set).ok_or_else(|| bad("bad set"))?,
                ));
            } else {
                reqs.push(Requirement::Exists(check_key(term).map_err(|_| bad("invalid key"))?));
            }
        }
        Ok(Self(reqs))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, set) => get(k).is_some_and(|v| set.iter().any(|s| s == v)),
            Requirement::NotIn(k, set) => get(k).is_none_or(|v| !set.iter().any(|s| s == v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter.
    pub(crate) fn parse(input: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (p, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: `{term}`")));
            };
            reqs.push((path.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether the object's fields satisfy every requirement; a missing field reads as "".
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, want)| {
            let mut cur = Some(object);
            for part in path.split('.') {
                cur = cur.and_then(|v| v.get(part));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *equal
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    /// `labelSelector`.
    pub(crate) labels: LabelSelector,
    /// `fieldSelector`.
    pub(crate) fields: FieldSelector,
}

impl Selectors {
    /// Whether the object passes both selectors.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

/// Splits on commas that are not inside a `( ... )` set.
fn split_terms(input: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

fn split_set_op<'a>(term: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    let idx = term.find(op)?;
    Some((term[..idx].trim(), term[idx + op.len()..].trim()))
}

fn parse_set(set: &str) -> Option<Vec<String>> {
    let inner = set.strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
}

fn check_key(key: &str) -> Result<String, ()> {
    let valid = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid { Ok(key.to_owned()) } else { Err(()) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn label_selector_operators() {
        let obj = json!({"metadata": {"labels": {"app": "a", "tier": "gpu"}}});
        let check = |sel: &str, want: bool| {
            assert_eq!(LabelSelector::parse(sel).map(|s| s.matches(&obj)).ok(), Some(want), "{sel}");
        };
        check("", true);
        check("app=a", true);
        check("app==a,tier=gpu", true);
        check("app!=a", false);
        check("app in (a, b),tier notin (cpu)", true);
        check("app notin (a)", false);
        check("tier", true);
        check("!tier", false);
        check("!missing,missing!=x", true);
        check("missing in (x)", false);
        assert!(LabelSelector::parse("app in a").is_err());
    }

    #[test]
    fn field_selector_paths() {
        let obj = json!({"metadata": {"name": "p", "namespace": "ns"}, "involvedObject": {"name": "j"}});
        let sel = FieldSelector::parse("metadata.name=p,involvedObject.name==j,metadata.namespace!=x").unwrap();
        assert!(sel.matches(&obj));
        assert!(!FieldSelector::parse("metadata.name=q").unwrap().matches(&obj));
    }
}
