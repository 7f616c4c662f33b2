//! What each queue holds and is owed in a session: `allocated`, `request`, `deserved`,
//! `guarantee`, the real capability and the share the queue order sorts by, as the
//! `proportion` plugin computes them from weights (pkg/scheduler/plugins/proportion/proportion.go
//! `OnSessionOpen`: deserved filled by weight from what remains, capped by the real capability
//! and the request, at least the guarantee, until every queue is met) or the `capacity` plugin
//! takes them from `spec.deserved` (pkg/scheduler/plugins/capacity/capacity.go
//! `buildQueueAttrs`). Read, not run.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;

use crate::sched::Resources;

/// One queue's attributes.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueueAttr {
    pub(crate) weight: i128,
    pub(crate) priority: i64,
    pub(crate) open: bool,
    pub(crate) reclaimable: bool,
    /// `spec.capability`; a dimension it lacks is unlimited.
    pub(crate) capability: Option<Resources>,
    pub(crate) guarantee: Resources,
    /// `spec.deserved` (what the capacity plugin reads).
    pub(crate) spec_deserved: Resources,
    pub(crate) allocated: Resources,
    pub(crate) request: Resources,
    pub(crate) deserved: Resources,
    /// The cluster less every queue's guarantee, plus this one's, capped by the capability; a
    /// dimension it lacks is unlimited.
    pub(crate) real_capability: Resources,
}

fn get(r: &Resources, k: &str) -> i128 {
    r.get(k).copied().unwrap_or(0)
}

/// `a - b` where positive, per dimension of `a` (`ExceededPart`).
pub(crate) fn exceeded_part(a: &Resources, b: &Resources) -> Resources {
    a.iter().map(|(k, v)| (k.clone(), (*v - get(b, k)).max(0))).collect()
}

/// `a <= b` on every dimension of `a` (`LessEqual` with missing dimensions zero).
pub(crate) fn less_equal(a: &Resources, b: &Resources) -> bool {
    a.iter().all(|(k, v)| *v <= get(b, k))
}

/// `a <= b` on the positive dimensions of `dims`, `b` unlimited where it lacks one
/// (`LessEqualWithDimension`).
pub(crate) fn fits_in(a: &Resources, b: &Resources, dims: &Resources) -> bool {
    dims.iter().filter(|(_, v)| **v > 0).all(|(k, _)| b.get(k).is_none_or(|limit| get(a, k) <= *limit))
}

pub(crate) fn add(into: &mut Resources, from: &Resources) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

pub(crate) fn sub(from: &mut Resources, what: &Resources) {
    for (k, v) in what {
        *from.entry(k.clone()).or_default() -= v;
    }
}

impl QueueAttr {
    /// `updateShare`: the largest allocated/deserved ratio over the deserved dimensions.
    pub(crate) fn share(&self) -> f64 {
        let mut share: f64 = 0.0;
        for (k, d) in &self.deserved {
            let a = get(&self.allocated, k);
            let s = if *d == 0 { if a == 0 { 0.0 } else { 1.0 } } else { a as f64 / *d as f64 };
            share = share.max(s);
        }
        share
    }

    /// proportion's `OverusedFn`: deserved <= allocated.
    pub(crate) fn overused(&self) -> bool {
        less_equal(&self.deserved, &self.allocated)
    }
}

/// Fills `deserved` of every queue (the ones with jobs in the session) for `plugin`
/// (`proportion` or `capacity`), given the cluster's allocatable `total` and every queue's
/// guarantee summed.
pub(crate) fn compute(
    queues: &mut BTreeMap<String, QueueAttr>,
    total: &Resources,
    total_guarantee: &Resources,
    plugin: &str,
) {
    for attr in queues.values_mut() {
        let mut real = exceeded_part(total, total_guarantee);
        add(&mut real, &attr.guarantee);
        if let Some(cap) = &attr.capability {
            for (k, c) in cap {
                // proportion: a capability of cpu or memory <= 0 is unlimited.
                if matches!(k.as_str(), "cpu" | "memory") && *c <= 0 {
                    continue;
                }
                let e = real.entry(k.clone()).or_insert(*c);
                *e = (*e).min(*c);
            }
        }
        attr.real_capability = real;
    }
    if plugin == "capacity" {
        for attr in queues.values_mut() {
            attr.deserved = attr.spec_deserved.clone();
            for (k, g) in &attr.guarantee {
                let e = attr.deserved.entry(k.clone()).or_default();
                *e = (*e).max(*g);
            }
        }
        return;
    }
    let mut remaining = total.clone();
    let mut meet: Vec<String> = Vec::new();
    // Each round meets at least one queue or stops, so it ends within the queue count.
    for _ in 0..=queues.len() {
        let total_weight: i128 = queues.iter().filter(|(n, _)| !meet.contains(n)).map(|(_, a)| a.weight.max(0)).sum();
        if total_weight == 0 {
            break;
        }
        let old_remaining = remaining.clone();
        let (mut increased, mut decreased) = (Resources::new(), Resources::new());
        for (name, attr) in queues.iter_mut() {
            if meet.contains(name) {
                continue;
            }
            let old = attr.deserved.clone();
            for (k, v) in &remaining {
                let part = (*v as f64 * attr.weight.max(0) as f64 / total_weight as f64) as i128;
                *attr.deserved.entry(k.clone()).or_default() += part;
            }
            // MinDimensionResource(realCapability, Infinity), then (request, Zero).
            for (k, d) in attr.deserved.iter_mut() {
                if let Some(c) = attr.real_capability.get(k) {
                    *d = (*d).min(*c);
                }
                *d = (*d).min(get(&attr.request, k));
            }
            for (k, g) in &attr.guarantee {
                let e = attr.deserved.entry(k.clone()).or_default();
                *e = (*e).max(*g);
            }
            if less_equal(&attr.request, &attr.deserved) || attr.deserved == old {
                meet.push(name.clone());
            }
            for (k, v) in &attr.deserved {
                let diff = v - get(&old, k);
                if diff > 0 {
                    *increased.entry(k.clone()).or_default() += diff;
                } else {
                    *decreased.entry(k.clone()).or_default() -= diff;
                }
            }
        }
        add(&mut remaining, &decreased);
        remaining = exceeded_part(&remaining, &increased);
        if remaining.values().all(|v| *v <= 0) || remaining == old_remaining {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(gpu: i128) -> Resources {
        [("nvidia.com/gpu".to_owned(), gpu * 1000)].into()
    }

    fn queue(weight: i128, request: i128) -> QueueAttr {
        QueueAttr { weight, open: true, reclaimable: true, request: res(request), ..QueueAttr::default() }
    }

    #[test]
    fn deserved_splits_by_weight_and_hands_on_what_a_queue_does_not_request() {
        let mut queues: BTreeMap<String, QueueAttr> =
            [("a".to_owned(), queue(1, 8)), ("b".to_owned(), queue(1, 2))].into();
        compute(&mut queues, &res(8), &Resources::new(), "proportion");
        assert_eq!(queues["a"].deserved, res(6));
        assert_eq!(queues["b"].deserved, res(2));
        let mut queues: BTreeMap<String, QueueAttr> =
            [("a".to_owned(), queue(3, 8)), ("b".to_owned(), queue(1, 8))].into();
        compute(&mut queues, &res(8), &Resources::new(), "proportion");
        assert_eq!((queues["a"].deserved.clone(), queues["b"].deserved.clone()), (res(6), res(2)));
    }

    #[test]
    fn guarantee_is_deserved_at_least_and_capacity_reads_the_spec() {
        let mut b = queue(1, 0);
        b.guarantee = res(3);
        let mut queues: BTreeMap<String, QueueAttr> = [("a".to_owned(), queue(1, 8)), ("b".to_owned(), b)].into();
        compute(&mut queues, &res(8), &res(3), "proportion");
        assert_eq!(queues["b"].deserved, res(3));
        assert_eq!(queues["a"].real_capability, res(5));
        let mut c = queue(1, 8);
        c.spec_deserved = res(2);
        let mut queues: BTreeMap<String, QueueAttr> = [("c".to_owned(), c)].into();
        compute(&mut queues, &res(8), &Resources::new(), "capacity");
        assert_eq!(queues["c"].deserved, res(2));
    }
}
