//! CRUD, Status errors, selectors, status subresource, garbage collection and discovery.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::json;
use theseus_kube_sim::SimConfig;

use crate::support::{api_code, post_raw, start};

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn crud_and_status_errors() {
    let ctx = start(SimConfig { namespaces: vec!["team".into()], ..SimConfig::default() }).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "team");
    let created = api.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("team"));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created.metadata.resource_version.clone().unwrap().parse().unwrap();

    let err = api.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(status.message, "configmaps \"a\" already exists");

    let err = api.get("missing").await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));

    let patched = api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k2": "v2"}}))).await.unwrap();
    assert_eq!(patched.data.as_ref().unwrap().len(), 2);
    let rv2: u64 = patched.metadata.resource_version.clone().unwrap().parse().unwrap();
    assert!(rv2 > rv1, "resourceVersion increases");

    // A replace carrying the old resourceVersion conflicts.
    let err = api.replace("a", &PostParams::default(), &created).await.unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    let mut fresh = api.get("a").await.unwrap();
    fresh.data = Some([("only".to_owned(), "one".to_owned())].into());
    let replaced = api.replace("a", &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(replaced.data.unwrap().keys().collect::<Vec<_>>(), ["only"]);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);

    let mut generated = cm("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = api.create(&PostParams::default(), &generated).await.unwrap();
    let name = generated.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left(), "delete returns the object");
    assert_eq!(api_code(&api.get("a").await.unwrap_err()), Some(404));
}

/// A LIST with `limit` pages as the API server does: key order, a `continue` token while more
/// match, selectors applied per page, and `410 Expired` for a token whose resourceVersion was
/// compacted (then the client starts over).
#[tokio::test]
async fn lists_page_with_limit_and_continue() {
    let ctx = start(SimConfig { watch_history: 8, namespaces: vec!["team".into()], ..SimConfig::default() }).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "team");
    for name in ["e", "b", "d", "a", "c"] {
        api.create(&PostParams::default(), &cm(name, json!({"odd": (name != "b" && name != "d").to_string()})))
            .await
            .unwrap();
    }
    let names = |l: &kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.metadata.name.clone().unwrap()).collect::<Vec<_>>()
    };
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = api.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(names(&second), ["c", "d"]);
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version, "the first page's version");
    let third = api
        .list(&ListParams::default().limit(2).continue_token(second.metadata.continue_.as_deref().unwrap()))
        .await
        .unwrap();
    assert_eq!(names(&third), ["e"]);
    assert!(third.metadata.continue_.is_none(), "the last page has no token");
    // Without a limit: everything at once, no token.
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!((all.items.len(), all.metadata.continue_.is_none()), (5, true));
    // Selectors apply before the limit counts.
    let odd = api.list(&ListParams::default().labels("odd=true").limit(2)).await.unwrap();
    assert_eq!(names(&odd), ["a", "c"]);
    let rest = api
        .list(
            &ListParams::default()
                .labels("odd=true")
                .limit(2)
                .continue_token(odd.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&rest), ["e"]);
    // A token from before the history's start is too old; a malformed one is a bad request.
    for i in 0..10 {
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"i": i.to_string()}}))).await.unwrap();
    }
    let err = api.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"), "{}", status.message);
    let err = api.list(&ListParams::default().limit(2).continue_token("not-a-token")).await.unwrap_err();
    assert_eq!(api_code(&err), Some(400));
}

#[tokio::test]
async fn label_and_field_selectors() {
    let ctx = start(SimConfig { namespaces: vec!["n1".into(), "n2".into()], ..SimConfig::default() }).await;
    for (ns, name, labels) in [
        ("n1", "a", json!({"app": "x", "tier": "gpu"})),
        ("n1", "b", json!({"app": "y"})),
        ("n2", "c", json!({"app": "x"})),
    ] {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
        api.create(&PostParams::default(), &cm(name, labels)).await.unwrap();
    }
    let all: Api<ConfigMap> = Api::all(ctx.client.clone());
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        let mut names: Vec<String> = list.items.into_iter().filter_map(|c| c.metadata.name).collect();
        names.sort();
        names
    };
    let check = async |selector: &str, want: &[&str]| {
        let got = names(all.list(&ListParams::default().labels(selector)).await.unwrap());
        assert_eq!(got, want, "selector {selector}");
    };
    check("", &["a", "b", "c"]).await;
    check("app=x", &["a", "c"]).await;
    check("app==x,tier", &["a"]).await;
    check("app!=x", &["b"]).await;
    check("app in (y, z)", &["b"]).await;
    check("app notin (y)", &["a", "c"]).await;
    check("!tier", &["b", "c"]).await;
    let n1: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "n1");
    assert_eq!(names(n1.list(&ListParams::default()).await.unwrap()), ["a", "b"]);
    let by_field = all.list(&ListParams::default().fields("metadata.name=c")).await.unwrap();
    assert_eq!(names(by_field), ["c"]);
    let by_ns = all.list(&ListParams::default().fields("metadata.namespace!=n1")).await.unwrap();
    assert_eq!(names(by_ns), ["c"]);
}

#[tokio::test]
async fn status_subresource_and_garbage_collection() {
    let ctx = start(SimConfig::default()).await;
    let svcs: Api<Service> = Api::namespaced(ctx.client.clone(), "default");
    let svc: Service =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})).unwrap();
    let owner = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let status_patch =
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}, "spec": {"ports": [{"port": 81}]}});
    let after = svcs.patch_status("s", &PatchParams::default(), &Patch::Merge(status_patch)).await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 80, "status patch leaves spec alone");
    assert!(after.status.as_ref().unwrap().load_balancer.is_some());
    let main_patch = json!({"status": null, "metadata": {"labels": {"l": "1"}}});
    let after = svcs.patch("s", &PatchParams::default(), &Patch::Merge(main_patch)).await.unwrap();
    assert!(after.status.unwrap().load_balancer.is_some(), "main patch leaves status alone");

    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let owned = |name: &str, uid: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Service", "name": "s", "uid": uid}
        ]}}))
        .unwrap()
    };
    let child =
        cms.create(&PostParams::default(), &owned("child", owner.metadata.uid.as_deref().unwrap())).await.unwrap();
    // A grandchild owned by the child goes too (transitive collection).
    cms.create(&PostParams::default(), &{
        let mut g = owned("grandchild", child.metadata.uid.as_deref().unwrap());
        g.metadata.owner_references.as_mut().unwrap()[0].kind = "ConfigMap".into();
        g
    })
    .await
    .unwrap();
    svcs.delete("s", &DeleteParams::background()).await.unwrap();
    assert_eq!(api_code(&cms.get("child").await.unwrap_err()), Some(404));
    assert_eq!(api_code(&cms.get("grandchild").await.unwrap_err()), Some(404));

    let owner = svcs.create(&PostParams::default(), &svc).await.unwrap();
    cms.create(&PostParams::default(), &owned("kept", owner.metadata.uid.as_deref().unwrap())).await.unwrap();
    svcs.delete("s", &DeleteParams::orphan()).await.unwrap();
    let kept = cms.get("kept").await.unwrap();
    assert!(kept.metadata.owner_references.unwrap_or_default().is_empty(), "orphaning removes the owner reference");

    // A dependent created after its owner was deleted (a controller working from a stale read)
    // is collected as well: every owner reference dangles.
    let late =
        cms.create(&PostParams::default(), &owned("late", owner.metadata.uid.as_deref().unwrap())).await.unwrap();
    assert_eq!(late.metadata.name.as_deref(), Some("late"), "the create itself succeeds");
    assert_eq!(api_code(&cms.get("late").await.unwrap_err()), Some(404), "the collector removed it");
    // One live owner among dangling ones keeps it.
    let live = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let mut both = owned("both", owner.metadata.uid.as_deref().unwrap());
    both.metadata.owner_references.as_mut().unwrap().push(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "s".into(),
            uid: live.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    );
    cms.create(&PostParams::default(), &both).await.unwrap();
    assert!(cms.get("both").await.is_ok(), "a live owner keeps its dependent");
}

#[tokio::test]
async fn discovery_serves_core_and_volcano() {
    let ctx = start(SimConfig::default()).await;
    let discovery = Discovery::new(ctx.client.clone()).run().await.unwrap();
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            found.push(format!("{}/{}:{}:{:?}", ar.api_version, ar.plural, ar.kind, caps.scope));
        }
    }
    for want in [
        "v1/pods:Pod:Namespaced",
        "v1/nodes:Node:Cluster",
        "batch.volcano.sh/v1alpha1/jobs:Job:Namespaced",
        "scheduling.volcano.sh/v1beta1/podgroups:PodGroup:Namespaced",
        "scheduling.volcano.sh/v1beta1/queues:Queue:Cluster",
    ] {
        assert!(found.iter().any(|f| f == want), "{want} not in {found:?}");
    }
    let req = http::Request::get("/apis/batch.volcano.sh/v1alpha1").body(Vec::new()).unwrap();
    let doc: serde_json::Value = ctx.client.request(req).await.unwrap();
    let jobs = doc["resources"].as_array().unwrap().iter().find(|r| r["name"] == "jobs").unwrap();
    assert_eq!(jobs["shortNames"], json!(["vcjob", "vj"]));
    assert_eq!(jobs["singularName"], "job");
    assert!(doc["resources"].as_array().unwrap().iter().any(|r| r["name"] == "jobs/status"));
    let version = ctx.client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");

    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = nodes.get("sim-node-0").await.unwrap();
    let alloc = node.status.unwrap().allocatable.unwrap();
    assert_eq!(alloc["nvidia.com/gpu"].0, "8");
}

#[tokio::test]
async fn custom_resources_are_pruned_validated_and_defaulted_over_http() {
    let ctx = start(SimConfig::default()).await;
    let path = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs";
    let mut job = serde_json::to_value(crate::support::vcjob("a", 1, 0, "busybox", &["true"])).unwrap();
    job["spec"]["minAvaliable"] = json!(1);

    let (code, warnings, stored) = post_raw(&ctx.client, path, &job).await;
    assert_eq!(code, 201, "{stored}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.minAvaliable\"""#]);
    assert!(stored["spec"].get("minAvaliable").is_none(), "pruned: {stored}");
    assert_eq!(stored["spec"]["maxRetry"], 3, "defaulted: {stored}");
    assert_eq!(ctx.sim.warnings(), [r#"unknown field "spec.minAvaliable""#]);

    job["metadata"]["name"] = json!("b");
    let strict = format!("{path}?fieldValidation=Strict");
    let (code, _, status) = post_raw(&ctx.client, &strict, &job).await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")), "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(r#"strict decoding error: unknown field "spec.minAvaliable""#)
    );

    // Through kube-rs: a 422 with the field path, and nothing created.
    let api = crate::support::vcjobs(&ctx.client, "default");
    let mut bad = crate::support::vcjob("c", 1, 0, "busybox", &["true"]);
    bad.data["spec"]["tasks"][0]["replicas"] = json!("one");
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Job.batch.volcano.sh \"c\" is invalid: spec.tasks[0].replicas: Invalid value: \"string\": \
         spec.tasks[0].replicas in body must be of type integer: \"string\""
    );
    assert_eq!(api_code(&api.get("c").await.unwrap_err()), Some(404));

    // A merge patch is admitted as the object it makes.
    let patch = json!({"spec": {"minAvailable": -1}});
    let err = api.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_err();
    assert_eq!(api_code(&err), Some(422));
    let patch = json!({"spec": {"bogus": 1, "maxRetry": 5}});
    let patched = api.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert!(patched.data["spec"].get("bogus").is_none());
    assert_eq!(patched.data["spec"]["maxRetry"], 5);
    // Volcano's validating webhook: only sizes and retries may change.
    let patch = json!({"spec": {"ttlSecondsAfterFinished": 60}});
    let err = api.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!(status.code, 400);
    assert!(
        status.message.starts_with(
            "admission webhook \"validatejob.volcano.sh\" denied the request: job updates may not change fields"
        ),
        "{}",
        status.message
    );

    // The queue must exist and be open.
    let mut lost = crate::support::vcjob("d", 1, 0, "busybox", &["true"]);
    lost.data["spec"]["queue"] = json!("nowhere");
    let err = api.create(&PostParams::default(), &lost).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("expected an API error, got {err:?}") };
    assert_eq!(
        status.message,
        "admission webhook \"validatejob.volcano.sh\" denied the request: unable to find job queue: \
         queues.scheduling.volcano.sh \"nowhere\" not found;"
    );
}

#[tokio::test]
async fn dry_run_checks_everything_and_stores_nothing() {
    let ctx = start(SimConfig::default()).await;
    let api = crate::support::vcjobs(&ctx.client, "default");
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let job = crate::support::vcjob("dry", 1, 0, "busybox", &["true"]);
    let answered = api.create(&dry, &job).await.unwrap();
    assert_eq!(answered.data["spec"]["maxRetry"], 3, "defaulted and admitted as a real create");
    assert_eq!(api_code(&api.get("dry").await.unwrap_err()), Some(404), "nothing stored");
    // A dry run is refused for what a real create is refused for.
    let mut lost = job.clone();
    lost.data["spec"]["queue"] = json!("nowhere");
    assert_eq!(api_code(&api.create(&dry, &lost).await.unwrap_err()), Some(400));

    api.create(&PostParams::default(), &job).await.unwrap();
    let patch = json!({"spec": {"maxRetry": 7}});
    let dry_patch = PatchParams { dry_run: true, ..PatchParams::default() };
    let answered = api.patch("dry", &dry_patch, &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(answered.data["spec"]["maxRetry"], 7);
    assert_eq!(api.get("dry").await.unwrap().data["spec"]["maxRetry"], 3, "the patch was not stored");
    let dry_delete = DeleteParams { dry_run: true, ..DeleteParams::default() };
    api.delete("dry", &dry_delete).await.unwrap();
    api.get("dry").await.expect("still there after a dry-run delete");

    let (code, _, status) = post_raw(
        &ctx.client,
        "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs?dryRun=Some",
        &serde_json::to_value(&job).unwrap(),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["message"], "dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\"");
}

#[tokio::test]
async fn names_follow_the_rule_of_their_kind() {
    let ctx = start(SimConfig::default()).await;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), "default");
    let svc =
        |name: &str| -> Service { serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap() };
    // A Service name is a DNS-1035 label: no leading digit, no dots.
    for bad in ["1abc", "a.b"] {
        let err = services.create(&PostParams::default(), &svc(bad)).await.unwrap_err();
        let kube::Error::Api(status) = &err else { panic!("{err:?}") };
        assert_eq!(status.code, 422);
        assert!(
            status.message.starts_with(&format!(
                "Service \"{bad}\" is invalid: metadata.name: Invalid value: \"{bad}\": a DNS-1035 label"
            )),
            "{}",
            status.message
        );
    }
    services.create(&PostParams::default(), &svc("abc-1")).await.unwrap();
    // A ConfigMap's is a subdomain: dots allowed, not empty parts.
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    cms.create(&PostParams::default(), &cm("1.a-b", json!({}))).await.unwrap();
    let err = cms.create(&PostParams::default(), &cm("a..b", json!({}))).await.unwrap_err();
    assert_eq!(api_code(&err), Some(422));
    // A custom resource's message names kind and group.
    let jobs = crate::support::vcjobs(&ctx.client, "default");
    let err = jobs
        .create(&PostParams::default(), &crate::support::vcjob("Bad_Name", 1, 0, "busybox", &["true"]))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("{err:?}") };
    assert!(
        status.message.starts_with("Job.batch.volcano.sh \"Bad_Name\" is invalid: metadata.name"),
        "{}",
        status.message
    );
}
