//! Authentication by client certificate (see `tls`) or bearer token and authorisation by RBAC,
//! as a real API server started with `--client-ca-file`, `--token-auth-file` and
//! `--authorization-mode=RBAC` does them: a request with a token that is not known is
//! `401 Unauthorized`; a user whose Roles and ClusterRoles (through RoleBindings and
//! ClusterRoleBindings) grant no rule for the request is `403 Forbidden` with the API server's
//! sentence.
//!
//! Upstream origins (kubernetes/kubernetes):
//! - tokens: `staging/src/k8s.io/apiserver/plugin/pkg/authenticator/token/tokenfile/tokenfile.go`
//!   (`NewCSV`: `token,user,uid[,"group1,group2"]` lines);
//! - rules: `plugin/pkg/auth/authorizer/rbac/rbac.go` (`RuleAllows`) and
//!   `pkg/apis/rbac/v1/evaluation_helpers.go` (`VerbMatches`, `APIGroupMatches`,
//!   `ResourceMatches`, `ResourceNameMatches`); bindings: `pkg/registry/rbac/validation/rule.go`
//!   (`VisitRulesFor`: ClusterRoleBindings everywhere, RoleBindings in their namespace);
//! - the 403 text: `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`
//!   (`forbiddenMessage`) inside `apimachinery/pkg/api/errors` `NewForbidden`;
//! - what every authenticated user may do: the `system:discovery` and `system:basic-user`
//!   ClusterRoles (discovery, `/version`, `/openapi`, health), bound to `system:authenticated`.
//!
//! Still different: no impersonation, no aggregated ClusterRoles, no `nonResourceURLs` rules
//! (discovery, `/version` and health are open to every user, the anonymous one included), no
//! RBAC objects served over the API (they are given at start).

use std::collections::HashMap;

use serde_json::Value;

use crate::status::ApiError;

/// Who may do what: the token file's users and the RBAC objects given at start.
#[derive(Debug, Clone, Default)]
pub struct Authz {
    /// Token to (user, groups).
    tokens: HashMap<String, (String, Vec<String>)>,
    /// What each subject (`User:name` / `Group:name`) was granted.
    grants: HashMap<String, Vec<Grant>>,
}

/// The rules of one binding: in its namespace (a RoleBinding) or everywhere (`None`).
type Grant = (Option<String>, Vec<Rule>);

/// One `PolicyRule`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    resource_names: Vec<String>,
}

/// What a request asks to do (`authorizer.Attributes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub(crate) verb: String,
    /// API group, `""` for core.
    pub(crate) group: String,
    /// Plural resource.
    pub(crate) resource: String,
    /// `exec`, `log`, `status`, when the request names one.
    pub(crate) subresource: Option<String>,
    /// `None` at the cluster scope.
    pub(crate) namespace: Option<String>,
    /// The object's name, when the request names one.
    pub(crate) name: Option<String>,
    /// `jobs.batch.volcano.sh`, for the message.
    pub(crate) qualified: String,
}

impl Authz {
    /// From a token file (`token,user,uid[,"group1,group2"]` per line) and a YAML stream of
    /// Role, ClusterRole, RoleBinding and ClusterRoleBinding objects.
    ///
    /// # Errors
    /// A line or object that cannot be read, with its place.
    pub fn from_files(tokens_csv: &str, rbac_yaml: &str) -> Result<Authz, String> {
        let mut authz = Authz::default();
        for (i, line) in tokens_csv.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            let [token, user, ..] = fields.as_slice() else {
                return Err(format!("token file line {}: want token,user,uid[,\"groups\"]", i + 1));
            };
            let groups = fields.get(3).map(|g| g.split(',').map(str::to_owned).collect()).unwrap_or_default();
            authz.tokens.insert(token.clone(), (user.clone(), groups));
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(rbac_yaml).map_err(|e| format!("RBAC file: {e}"))?;
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        let rules_of = |kind: &str, name: &str, namespace: Option<&str>| -> Option<Vec<Rule>> {
            docs.iter()
                .find(|d| {
                    d["kind"] == kind
                        && d["metadata"]["name"] == name
                        && (kind == "ClusterRole" || d["metadata"]["namespace"].as_str() == namespace)
                })
                .map(|role| role["rules"].as_array().into_iter().flatten().map(rule).collect())
        };
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap_or("");
            let namespace = match kind {
                "RoleBinding" => Some(doc["metadata"]["namespace"].as_str().unwrap_or("default").to_owned()),
                "ClusterRoleBinding" => None,
                "Role" | "ClusterRole" => continue,
                other => return Err(format!("RBAC file: unexpected kind {other:?}")),
            };
            let role_kind = doc["roleRef"]["kind"].as_str().unwrap_or("");
            let role_name = doc["roleRef"]["name"].as_str().unwrap_or("");
            let Some(rules) = rules_of(role_kind, role_name, namespace.as_deref()) else {
                // As upstream: a binding to a role that does not exist grants nothing.
                continue;
            };
            for subject in doc["subjects"].as_array().into_iter().flatten() {
                let key =
                    format!("{}:{}", subject["kind"].as_str().unwrap_or(""), subject["name"].as_str().unwrap_or(""));
                authz.grants.entry(key).or_default().push((namespace.clone(), rules.clone()));
            }
        }
        Ok(authz)
    }

    /// Who sends the request, as kube-apiserver's union authenticator decides it: the client
    /// certificate's subject first (`certificate`, CN and O, already verified against the CA;
    /// one without a CN authenticates nothing), then the `Authorization: Bearer` header;
    /// without either, the anonymous user, as with the API server's default
    /// `--anonymous-auth=true` (`apiserver/pkg/authentication/request/anonymous/anonymous.go`),
    /// whom RBAC then judges.
    ///
    /// # Errors
    /// `401 Unauthorized` for a token that is not known.
    pub(crate) fn authenticate(
        &self,
        certificate: Option<&crate::Identity>,
        authorization: &str,
    ) -> Result<(String, Vec<String>), ApiError> {
        if let Some(id) = certificate.filter(|id| !id.user.is_empty()) {
            return Ok((id.user.clone(), id.groups.clone()));
        }
        if authorization.trim().is_empty() {
            return Ok(("system:anonymous".to_owned(), vec!["system:unauthenticated".to_owned()]));
        }
        authorization
            .strip_prefix("Bearer ")
            .and_then(|token| self.tokens.get(token.trim()))
            .cloned()
            .ok_or_else(ApiError::unauthorized)
    }

    /// Whether `user` (in `groups`) may do `attrs`.
    ///
    /// # Errors
    /// `403 Forbidden`, worded as the API server words it.
    pub(crate) fn authorize(&self, user: &str, groups: &[String], attrs: &Attributes) -> Result<(), ApiError> {
        // `system:masters` bypasses RBAC (kubernetes `pkg/kubeapiserver/authorizer/config.go`,
        // the privileged-groups authorizer ahead of RBAC).
        if groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        let authenticated = (user != "system:anonymous").then(|| "Group:system:authenticated".to_owned());
        let subjects = std::iter::once(format!("User:{user}"))
            .chain(groups.iter().map(|g| format!("Group:{g}")))
            .chain(authenticated);
        for subject in subjects {
            for (namespace, rules) in self.grants.get(&subject).into_iter().flatten() {
                let in_scope = namespace.is_none() || namespace.as_deref() == attrs.namespace.as_deref();
                if in_scope && rules.iter().any(|r| allows(r, attrs)) {
                    return Ok(());
                }
            }
        }
        let resource = match &attrs.subresource {
            Some(sub) => format!("{}/{sub}", attrs.resource),
            None => attrs.resource.clone(),
        };
        let reason = match &attrs.namespace {
            Some(ns) => format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {ns:?}",
                attrs.verb, attrs.group
            ),
            None => format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                attrs.verb, attrs.group
            ),
        };
        let message = match &attrs.name {
            Some(name) => format!("{} {name:?} is forbidden: {reason}", attrs.qualified),
            None => format!("{} is forbidden: {reason}", attrs.qualified),
        };
        Err(ApiError::forbidden(&attrs.qualified, attrs.name.as_deref().unwrap_or(""), message))
    }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

fn rule(value: &Value) -> Rule {
    Rule {
        api_groups: strings(&value["apiGroups"]),
        resources: strings(&value["resources"]),
        verbs: strings(&value["verbs"]),
        resource_names: strings(&value["resourceNames"]),
    }
}

/// `RuleAllows`: verb, group, resource (`pods/exec` for a subresource; `*`, and `*/exec` for
/// any resource's subresource) and, when the rule lists names, the name.
fn allows(rule: &Rule, attrs: &Attributes) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|v| v == "*" || v == want);
    let resource_ok = match &attrs.subresource {
        Some(sub) => {
            let combined = format!("{}/{sub}", attrs.resource);
            rule.resources.iter().any(|r| r == "*" || *r == combined || *r == format!("*/{sub}"))
        }
        None => any(&rule.resources, &attrs.resource),
    };
    let name_ok =
        rule.resource_names.is_empty() || attrs.name.as_ref().is_some_and(|n| rule.resource_names.contains(n));
    any(&rule.verbs, &attrs.verb) && any(&rule.api_groups, &attrs.group) && resource_ok && name_ok
}

/// A CSV line of the token file (quoted fields may hold commas).
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests;
