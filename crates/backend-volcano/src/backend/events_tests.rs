//! Tests of how a pending job's events are read (`events_about`), against the simulator.

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::*;

/// A pending gang's pod events come from one LIST, not a request per pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_of_a_big_gangs_pods_come_from_one_list() {
    let sim = theseus_kube_sim::Sim::start(theseus_kube_sim::SimConfig::default()).await.expect("sim");
    let mut config = kube::Config::new(sim.url().parse().expect("a URL"));
    config.root_cert = Some(vec![sim.ca_der()]);
    let cluster = Cluster::from_client(kube::Client::try_from(config).expect("client"), "default");
    let api: Api<Event> = Api::namespaced(cluster.client().clone(), "default");
    let pod_names: Vec<String> = (0..12).map(|i| format!("big-worker-{i}")).chain(["other-0".into()]).collect();
    for (i, pod) in pod_names.iter().enumerate() {
        let event = Event {
            metadata: ObjectMeta { name: Some(format!("ev-{i}")), ..ObjectMeta::default() },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.clone()),
                namespace: Some("default".into()),
                ..ObjectReference::default()
            },
            reason: Some("FailedMount".into()),
            message: Some(format!("cannot mount for {pod}")),
            ..Event::default()
        };
        api.create(&PostParams::default(), &event).await.expect("event");
    }
    let pods: Vec<Pod> = pod_names[..12]
        .iter()
        .map(|n| Pod { metadata: ObjectMeta { name: Some(n.clone()), ..ObjectMeta::default() }, ..Pod::default() })
        .collect();
    let job = Job::new("big", crate::types::JobSpec::default());
    let before = sim.requests().len();
    let found = events_about(&cluster, &job, None, &pods).await;
    let mut about: Vec<String> = found.iter().filter_map(|e| e.involved_object.name.clone()).collect();
    about.sort();
    let mut want = pod_names[..12].to_vec();
    want.sort();
    assert_eq!(about, want, "the gang's pods' events, not another pod's");
    let asked = sim.requests()[before..].iter().filter(|(_, p)| p.contains("/events")).count();
    assert!(asked <= 2, "{asked} event requests for 12 pods");
}
