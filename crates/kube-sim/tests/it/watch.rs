//! Watches: kube-rs `watcher`, resumption, bookmarks, 410 Gone, selector transitions, dropped
//! watches.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use theseus_kube_sim::SimConfig;

use crate::support::start;

fn cm(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}})).unwrap()
}

async fn next<S: futures::Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10s")
        .expect("stream open")
}

#[tokio::test]
async fn watcher_sees_changes_matching_its_selector() {
    let ctx = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    api.create(&PostParams::default(), &cm("before", "w")).await.unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default().labels("app=w")).boxed();
    let mut init = Vec::new();
    loop {
        match next(&mut stream).await.unwrap() {
            watcher::Event::InitApply(o) => init.push(o.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(init, ["before"]);
    api.create(&PostParams::default(), &cm("other", "x")).await.unwrap();
    api.create(&PostParams::default(), &cm("new", "w")).await.unwrap();
    match next(&mut stream).await.unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("new")),
        other => panic!("unexpected {other:?}"),
    }
    // Leaving the selector reads as a delete.
    api.patch("new", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})))
        .await
        .unwrap();
    match next(&mut stream).await.unwrap() {
        watcher::Event::Delete(o) => assert_eq!(o.metadata.name.as_deref(), Some("new")),
        other => panic!("unexpected {other:?}"),
    }
    // The watcher uses resourceVersion from its list and asks for bookmarks.
    let watch_req = ctx.sim.requests().into_iter().find(|(_, p)| p.contains("watch=true")).expect("a watch request");
    assert!(
        watch_req.1.contains("allowWatchBookmarks=true") && watch_req.1.contains("resourceVersion="),
        "{watch_req:?}"
    );
}

#[tokio::test]
async fn watch_resumes_after_a_resource_version() {
    let ctx = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let a = api.create(&PostParams::default(), &cm("a", "r")).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "1"}}))).await.unwrap();
    api.create(&PostParams::default(), &cm("b", "r")).await.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        match next(&mut stream).await.unwrap() {
            WatchEvent::Modified(o) => seen.push(format!("M {}", o.metadata.name.unwrap())),
            WatchEvent::Added(o) => seen.push(format!("A {}", o.metadata.name.unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["M a", "A b"]);
}

#[tokio::test]
async fn bookmarks_are_sent_when_allowed() {
    let config = SimConfig { bookmark_interval: Duration::from_millis(50), ..SimConfig::default() };
    let ctx = start(config).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let a = api.create(&PostParams::default(), &cm("a", "b")).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams { bookmarks: true, ..WatchParams::default() }, &rv).await.unwrap().boxed();
    match next(&mut stream).await.unwrap() {
        WatchEvent::Bookmark(bm) => {
            assert!(bm.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse::<u64>().unwrap())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn compacted_resource_version_is_gone() {
    let config = SimConfig { watch_history: 3, ..SimConfig::default() };
    let ctx = start(config).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let first = api.create(&PostParams::default(), &cm("c0", "g")).await.unwrap();
    for i in 1..6 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "g")).await.unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match next(&mut stream).await {
        Ok(WatchEvent::Error(status)) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn dropped_watches_end_and_timeouts_apply() {
    let ctx = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let mut stream = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    ctx.sim.faults().drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.expect("the stream ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
    let mut timed = api.watch(&WatchParams::default().timeout(1), "0").await.unwrap().boxed();
    let end = tokio::time::timeout(Duration::from_secs(10), timed.try_next()).await.expect("the watch times out");
    assert!(matches!(end, Ok(None)), "{end:?}");
}
