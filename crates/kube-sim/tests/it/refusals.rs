//! What a real API server refuses at admission: objects in a namespace that does not exist
//! (`NamespaceLifecycle`).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use theseus_kube_sim::SimConfig;

use crate::support::{api_code, post_raw, start, vcjob};

fn config_map(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[tokio::test]
async fn a_namespace_that_does_not_exist_is_refused_until_it_is_created() {
    let ctx = start(SimConfig { namespaces: vec!["team-a".into()], ..SimConfig::default() }).await;
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let mut names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["default", "kube-node-lease", "kube-public", "kube-system", "team-a"]);

    // The API server's own Status (NamespaceLifecycle: `errors.NewNotFound`).
    let (code, _, status) = post_raw(&ctx.client, "/api/v1/namespaces/ml/configmaps", &config_map("c")).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["reason"], "NotFound", "{status}");
    assert_eq!(status["message"], "namespaces \"ml\" not found", "{status}");
    assert_eq!(status["details"], json!({"name": "ml", "kind": "namespaces"}), "{status}");
    // A vcjob too, before its schema or webhooks are consulted; a dry run is refused alike.
    let jobs = crate::support::vcjobs(&ctx.client, "ml");
    let job = vcjob("j", 1, 0, "busybox", &["true"]);
    assert_eq!(api_code(&jobs.create(&PostParams::default(), &job).await.unwrap_err()), Some(404));
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    assert_eq!(api_code(&jobs.create(&dry, &job).await.unwrap_err()), Some(404));
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "ml");
    assert!(cms.list(&ListParams::default()).await.unwrap().items.is_empty(), "nothing was stored");

    // Pre-created (`SimConfig::namespaces`) and system namespaces accept objects.
    for ns in ["team-a", "kube-system"] {
        let (code, _, body) =
            post_raw(&ctx.client, &format!("/api/v1/namespaces/{ns}/configmaps"), &config_map("c")).await;
        assert_eq!(code, 201, "{ns}: {body}");
    }
    // Once the namespace is created through the API, the same create succeeds.
    let ml: Namespace = serde_json::from_value(json!({"metadata": {"name": "ml"}})).unwrap();
    namespaces.create(&PostParams::default(), &ml).await.unwrap();
    let (code, _, body) = post_raw(&ctx.client, "/api/v1/namespaces/ml/configmaps", &config_map("c")).await;
    assert_eq!(code, 201, "{body}");
    jobs.create(&PostParams::default(), &job).await.unwrap();
}
