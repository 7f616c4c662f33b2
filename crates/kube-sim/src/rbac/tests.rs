//! RBAC cases: the project's least-privilege Role (`docs/rbac.yaml`) allows what theseus does
//! and nothing more; refusals carry the API server's sentence.

use super::*;

const TOKENS: &str = "# token,user,uid,groups\nt-researcher,researcher,1\nt-other,other,2,\"team-a,team-b\"\n";

fn docs_rbac() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rbac.yaml")).unwrap()
}

fn attrs(verb: &str, group: &str, resource: &str, namespace: Option<&str>, name: Option<&str>) -> Attributes {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
        None => (resource.to_owned(), None),
    };
    let qualified = if group.is_empty() { resource.clone() } else { format!("{resource}.{group}") };
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource,
        subresource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        qualified,
    }
}

#[test]
fn tokens_name_users_and_unknown_ones_are_401() {
    let authz = Authz::from_files(TOKENS, &docs_rbac()).unwrap();
    assert_eq!(authz.authenticate(None, "Bearer t-researcher").unwrap().0, "researcher");
    assert_eq!(authz.authenticate(None, "Bearer t-other").unwrap().1, ["team-a", "team-b"]);
    assert_eq!(authz.authenticate(None, "").unwrap().0, "system:anonymous", "no token: the anonymous user");
    let anonymous = ["system:unauthenticated".to_owned()];
    let err =
        authz.authorize("system:anonymous", &anonymous, &attrs("list", "", "pods", Some("default"), None)).unwrap_err();
    assert_eq!(err.code, 403, "whom RBAC refuses");
    for bad in ["Bearer nope", "Basic dDpy"] {
        let err = authz.authenticate(None, bad).unwrap_err();
        assert_eq!((err.code, err.reason, err.message.as_str()), (401, "Unauthorized", "Unauthorized"), "{bad:?}");
    }
}

#[test]
fn the_documented_role_allows_what_theseus_does_in_its_namespace() {
    let authz = Authz::from_files(TOKENS, &docs_rbac()).unwrap();
    let ns = Some("default");
    for (verb, group, resource, name) in [
        ("create", "batch.volcano.sh", "jobs", None),
        ("get", "batch.volcano.sh", "jobs", Some("j")),
        ("list", "batch.volcano.sh", "jobs", None),
        ("delete", "batch.volcano.sh", "jobs", Some("j")),
        ("get", "scheduling.volcano.sh", "podgroups", Some("pg")),
        ("watch", "", "pods", None),
        ("get", "", "pods/log", Some("p")),
        ("create", "", "pods/exec", Some("p")),
        ("create", "", "pods/portforward", Some("p")),
        ("patch", "", "secrets", Some("s")),
        ("list", "", "events", None),
        ("update", "coordination.k8s.io", "leases", Some("l")),
    ] {
        authz.authorize("researcher", &[], &attrs(verb, group, resource, ns, name)).unwrap();
    }
    // The ClusterRole: capacity reads at the cluster scope.
    authz.authorize("researcher", &[], &attrs("get", "scheduling.volcano.sh", "queues", None, Some("q"))).unwrap();
    authz.authorize("researcher", &[], &attrs("list", "", "nodes", None, None)).unwrap();
}

#[test]
fn anything_else_is_403_with_the_api_servers_sentence() {
    let authz = Authz::from_files(TOKENS, &docs_rbac()).unwrap();
    let cases = [
        (
            "researcher",
            attrs("get", "", "secrets", Some("kube-system"), Some("admin")),
            "secrets \"admin\" is forbidden: User \"researcher\" cannot get resource \"secrets\" in API group \"\" in the \
             namespace \"kube-system\"",
        ),
        (
            "researcher",
            attrs("update", "batch.volcano.sh", "jobs", Some("default"), Some("j")),
            "jobs.batch.volcano.sh \"j\" is forbidden: User \"researcher\" cannot update resource \"jobs\" in API group \
             \"batch.volcano.sh\" in the namespace \"default\"",
        ),
        (
            "researcher",
            attrs("create", "", "pods/attach", Some("default"), Some("p")),
            "pods \"p\" is forbidden: User \"researcher\" cannot create resource \"pods/attach\" in API group \"\" \
             in the namespace \"default\"",
        ),
        (
            "other",
            attrs("list", "", "nodes", None, None),
            "nodes is forbidden: User \"other\" cannot list resource \"nodes\" in API group \"\" at the cluster scope",
        ),
    ];
    for (user, attrs, message) in cases {
        let err = authz.authorize(user, &[], &attrs).unwrap_err();
        assert_eq!((err.code, err.reason), (403, "Forbidden"));
        assert_eq!(err.message, message);
    }
}

#[test]
fn groups_wildcards_and_resource_names_follow_upstream() {
    let rbac = "
kind: ClusterRole
metadata: {name: reader}
rules:
  - {apiGroups: ['*'], resources: ['*/log'], verbs: [get]}
  - {apiGroups: [''], resources: [configmaps], verbs: ['*'], resourceNames: [settings]}
---
kind: RoleBinding
metadata: {name: b, namespace: team}
roleRef: {kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: team-a}]
";
    let authz = Authz::from_files(TOKENS, rbac).unwrap();
    let groups = ["team-a".to_owned()];
    let team = Some("team");
    authz.authorize("other", &groups, &attrs("get", "", "pods/log", team, Some("p"))).unwrap();
    authz.authorize("other", &groups, &attrs("delete", "", "configmaps", team, Some("settings"))).unwrap();
    // Names restrict: no list, no other name; a RoleBinding grants only in its namespace.
    assert!(authz.authorize("other", &groups, &attrs("list", "", "configmaps", team, None)).is_err());
    assert!(authz.authorize("other", &groups, &attrs("get", "", "configmaps", team, Some("x"))).is_err());
    assert!(authz.authorize("other", &groups, &attrs("get", "", "pods/log", Some("elsewhere"), Some("p"))).is_err());
    assert!(authz.authorize("other", &[], &attrs("get", "", "pods/log", team, Some("p"))).is_err(), "not in the group");
}
