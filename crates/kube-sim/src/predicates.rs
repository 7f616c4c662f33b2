//! The node filters a scheduler runs before it looks at resources' fit: `NodeAffinity` (the
//! pod's `nodeSelector` and its required node affinity) and `TaintToleration`, with the reasons
//! they give, and the "N reason" histogram both schedulers build from them.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).
//!
//! Followed from the Kubernetes source (read, not run): `nodeaffinity.Filter` and
//! `GetRequiredNodeAffinity` (pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go,
//! component-helpers/scheduling/corev1/nodeaffinity: selector labels must all be equal; terms
//! are ORed, a term's expressions and fields ANDed; a term with neither, or one that does not
//! parse, matches no node), `tainttoleration.Filter` (`FindMatchingUntoleratedTaint` over the
//! `NoSchedule` and `NoExecute` taints, `Toleration.ToleratesTaint`) and the `FitError`
//! histograms (`sortReasonsHistogram`: `"<count> <reason>"` strings sorted, joined with ", ").

use std::collections::BTreeMap;

use serde_json::Value;

/// `nodeaffinity.ErrReasonPod`.
pub(crate) const AFFINITY_MISMATCH: &str = "node(s) didn't match Pod's node affinity/selector";

/// The taint plugin's reason as Volcano v1.15.1 reports it: its vendored Kubernetes v1.35.3
/// no longer names the taint (kubernetes/kubernetes#134740, "remove taint values from
/// unschedulable messages in pod status"; read, not run).
pub(crate) const UNTOLERATED_TAINTS: &str = "node(s) had untolerated taint(s)";

/// The taint plugin's reason as the default scheduler of the Kubernetes version the simulator
/// serves (v1.33.0, before #134740) words it: `node(s) had untolerated taint {key: value}`.
pub(crate) fn untolerated_taint_named(taint: &Value) -> String {
    format!("node(s) had untolerated taint {{{}: {}}}", text(taint, "key"), text(taint, "value"))
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

fn list(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

/// Whether `node` passes the pod's `nodeSelector` and its
/// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
pub(crate) fn matches_node_affinity(pod_spec: &Value, node: &Value) -> bool {
    let labels = node.pointer("/metadata/labels");
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
    let selector_ok = pod_spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).is_some_and(|have| Some(have) == v.as_str()));
    if !selector_ok {
        return false;
    }
    let Some(required) = pod_spec.pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
    else {
        return true;
    };
    let name = text(&node["metadata"], "name");
    list(required.get("nodeSelectorTerms")).any(|term| term_matches(term, &label, name))
}

/// One `NodeSelectorTerm`: every expression over the labels and every field (only
/// `metadata.name` is a node field selector) holds; an empty term matches nothing.
fn term_matches<'a>(term: &Value, label: &impl Fn(&str) -> Option<&'a str>, name: &str) -> bool {
    let exprs: Vec<&Value> = list(term.get("matchExpressions")).collect();
    let fields: Vec<&Value> = list(term.get("matchFields")).collect();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_holds(r, label(text(r, "key"))) == Some(true))
        && fields.iter().all(|r| {
            let value = (text(r, "key") == "metadata.name").then_some(name);
            // A field requirement takes exactly one value for In and NotIn.
            let one = list(r.get("values")).count() == 1;
            one && value.is_some() && requirement_holds(r, value) == Some(true)
        })
}

/// A `NodeSelectorRequirement` against the value the node has for its key; `None` when the
/// requirement does not parse (wrong number of values, an unknown operator, Gt/Lt values that
/// are not integers), which makes its term match nothing.
fn requirement_holds(req: &Value, have: Option<&str>) -> Option<bool> {
    let values: Vec<&str> = list(req.get("values")).filter_map(Value::as_str).collect();
    match text(req, "operator") {
        "In" if !values.is_empty() => Some(have.is_some_and(|h| values.contains(&h))),
        "NotIn" if !values.is_empty() => Some(!have.is_some_and(|h| values.contains(&h))),
        "Exists" if values.is_empty() => Some(have.is_some()),
        "DoesNotExist" if values.is_empty() => Some(have.is_none()),
        op @ ("Gt" | "Lt") if values.len() == 1 => {
            let bound: i64 = values[0].parse().ok()?;
            let Some(have) = have.and_then(|h| h.parse::<i64>().ok()) else { return Some(false) };
            Some(if op == "Gt" { have > bound } else { have < bound })
        }
        _ => None,
    }
}

/// The first `NoSchedule` or `NoExecute` taint of `node` that none of the pod's tolerations
/// tolerates (`PreferNoSchedule` never refuses a pod).
pub(crate) fn untolerated_taint<'a>(pod_spec: &Value, node: &'a Value) -> Option<&'a Value> {
    list(node.pointer("/spec/taints"))
        .filter(|t| matches!(text(t, "effect"), "NoSchedule" | "NoExecute"))
        .find(|taint| !list(pod_spec.get("tolerations")).any(|tol| tolerates(tol, taint)))
}

/// `Toleration.ToleratesTaint`: an empty effect or key matches any; operator `Exists` matches
/// any value, `Equal` (or none) the same value.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let (effect, key) = (text(toleration, "effect"), text(toleration, "key"));
    if !effect.is_empty() && effect != text(taint, "effect") {
        return false;
    }
    if !key.is_empty() && key != text(taint, "key") {
        return false;
    }
    match text(toleration, "operator") {
        "" | "Equal" => text(toleration, "value") == text(taint, "value"),
        "Exists" => true,
        _ => false,
    }
}

/// `sortReasonsHistogram`: each distinct reason with how many nodes gave it, as
/// `"<count> <reason>"`, sorted as strings and joined with ", ".
pub(crate) fn histogram<'a>(reasons: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    fn affinity(terms: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
    }

    #[test]
    fn node_selector_needs_every_label_equal() {
        let n = node(json!({"gpu": "a100", "zone": "z1"}), json!([]));
        assert!(matches_node_affinity(&json!({}), &n));
        assert!(matches_node_affinity(&json!({"nodeSelector": {"gpu": "a100"}}), &n));
        assert!(!matches_node_affinity(&json!({"nodeSelector": {"gpu": "a100", "zone": "z2"}}), &n));
        assert!(!matches_node_affinity(&json!({"nodeSelector": {"rdma": "true"}}), &n));
    }

    #[test]
    fn required_affinity_ors_terms_and_ands_expressions() {
        let n = node(json!({"gpu": "a100", "cores": "64"}), json!([]));
        let expr = |key: &str, op: &str, values: Value| json!({"key": key, "operator": op, "values": values});
        let term = |exprs: Vec<Value>| json!({"matchExpressions": exprs});
        let cases = [
            (vec![term(vec![expr("gpu", "In", json!(["h100", "a100"]))])], true),
            (vec![term(vec![expr("gpu", "In", json!(["h100"]))])], false),
            (vec![term(vec![expr("gpu", "NotIn", json!(["h100"]))])], true),
            (vec![term(vec![expr("rdma", "NotIn", json!(["true"]))])], true),
            (vec![term(vec![expr("gpu", "Exists", json!([]))])], true),
            (vec![term(vec![expr("rdma", "Exists", json!([]))])], false),
            (vec![term(vec![expr("rdma", "DoesNotExist", json!([]))])], true),
            (vec![term(vec![expr("gpu", "DoesNotExist", json!([]))])], false),
            (vec![term(vec![expr("cores", "Gt", json!(["32"]))])], true),
            (vec![term(vec![expr("cores", "Lt", json!(["32"]))])], false),
            // ANDed within a term.
            (vec![term(vec![expr("gpu", "Exists", json!([])), expr("rdma", "Exists", json!([]))])], false),
            // ORed across terms.
            (vec![term(vec![expr("rdma", "Exists", json!([]))]), term(vec![expr("gpu", "In", json!(["a100"]))])], true),
            // An empty term, a term that does not parse, no terms: nothing matches.
            (vec![json!({})], false),
            (vec![term(vec![expr("gpu", "In", json!([]))])], false),
            (vec![], false),
            // matchFields on the node's name.
            (vec![json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})], true),
            (vec![json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]})], false),
        ];
        for (terms, want) in cases {
            let terms = json!(terms);
            assert_eq!(matches_node_affinity(&affinity(terms.clone()), &n), want, "{terms}");
        }
        // nodeSelector and affinity must both hold.
        let mut both = affinity(json!([term(vec![expr("gpu", "Exists", json!([]))])]));
        both["nodeSelector"] = json!({"zone": "z9"});
        assert!(!matches_node_affinity(&both, &n));
    }

    #[test]
    fn taints_need_a_toleration_unless_preferred() {
        let taints = json!([
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "rdma", "effect": "NoExecute"},
        ]);
        let n = node(json!({}), taints);
        let first = |tols: Value| untolerated_taint(&json!({"tolerations": tols}), &n).map(|t| text(t, "key"));
        assert_eq!(first(json!([])), Some("dedicated"), "PreferNoSchedule never blocks");
        let dedicated = json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"});
        assert_eq!(first(json!([dedicated.clone()])), Some("rdma"));
        let rdma = json!({"key": "rdma", "operator": "Exists"});
        assert_eq!(first(json!([dedicated, rdma.clone()])), None);
        assert_eq!(first(json!([{"operator": "Exists"}])), None, "an empty key with Exists tolerates all");
        let wrong_value = json!({"key": "dedicated", "value": "cpu", "effect": "NoSchedule"});
        assert_eq!(first(json!([wrong_value, rdma.clone()])), Some("dedicated"));
        let wrong_effect = json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"});
        assert_eq!(first(json!([wrong_effect, rdma])), Some("dedicated"));
        assert_eq!(untolerated_taint_named(&n["spec"]["taints"][2]), "node(s) had untolerated taint {rdma: }");
    }

    #[test]
    fn histogram_counts_and_sorts_as_strings() {
        let reasons = ["Insufficient cpu", AFFINITY_MISMATCH, AFFINITY_MISMATCH, "Insufficient cpu", "b"];
        assert_eq!(histogram(reasons), "1 b, 2 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector");
    }
}
