//! The resources of the code-shipping helper's container, read from the host's
//! `helper_resources` keys; what rendering the helper and validating a host both use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::quantity::Quantity;

/// The helper's resources from `requests.cpu: "1"` style keys (split on the first dot); the
/// default is 1 CPU and 1Gi for both requests and limits. A given map replaces the default.
///
/// # Errors
/// A message naming the key for a key that is not `requests.<name>` or `limits.<name>`, or a
/// value that is not a quantity.
pub fn helper_resources(given: Option<&BTreeMap<String, String>>) -> Result<ResourceRequirements, String> {
    let default: BTreeMap<String, String> =
        [("requests.cpu", "1"), ("requests.memory", "1Gi"), ("limits.cpu", "1"), ("limits.memory", "1Gi")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let map = given.unwrap_or(&default);
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    for (key, value) in map {
        let section = match key.split_once('.') {
            Some(("requests", name)) if !name.is_empty() => (&mut requests, name),
            Some(("limits", name)) if !name.is_empty() => (&mut limits, name),
            _ => {
                return Err(format!("{key}: expected a key like \"requests.cpu\" or \"limits.memory\""));
            }
        };
        if Quantity::parse(value).map_err(|e| format!("{key}: {e}"))?.value() < 0.0 {
            return Err(format!("{key}: {value:?} is negative"));
        }
        section.0.insert(section.1.to_owned(), K8sQuantity(value.clone()));
    }
    Ok(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn default_resources() {
        let r = helper_resources(None).unwrap();
        let req = r.requests.unwrap();
        assert_eq!(req["cpu"].0, "1");
        assert_eq!(req["memory"].0, "1Gi");
        assert_eq!(r.limits.unwrap()["memory"].0, "1Gi");
    }

    #[test]
    fn given_resources_replace_the_default() {
        let r = helper_resources(Some(&map(&[("requests.cpu", "500m"), ("limits.nvidia.com/gpu", "0")]))).unwrap();
        assert_eq!(r.requests.unwrap().len(), 1);
        assert_eq!(r.limits.unwrap()["nvidia.com/gpu"].0, "0");
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        for (key, value, want) in [
            ("cpu", "1", "cpu: expected"),
            ("request.cpu", "1", "request.cpu: expected"),
            ("limits.", "1", "limits.: expected"),
            ("limits.memory", "1Gx", "limits.memory: invalid quantity \"1Gx\""),
            ("requests.cpu", "-1", "requests.cpu: \"-1\" is negative"),
        ] {
            let err = helper_resources(Some(&map(&[(key, value)]))).unwrap_err();
            assert!(err.starts_with(want), "{err}");
        }
    }
}
