//! The simulator as kind's API server over TLS: a CA made at start, a serving certificate for
//! `127.0.0.1` and `localhost`, and authentication by client certificate (CN the user, O the
//! groups), bearer token or none (anonymous), each judged by RBAC.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use theseus_kube_sim::{Authz, Sim, SimConfig};

use crate::support::client_config;

const TOKENS: &str = "t-researcher,researcher,1\n";

/// `researcher` may list pods in `default`, nothing else.
const RBAC: &str = "
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pods, namespace: default}
rules: [{apiGroups: [''], resources: [pods], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pods, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pods}
subjects: [{kind: User, name: researcher}]
";

async fn rbac_sim() -> Sim {
    let authz = Authz::from_files(TOKENS, RBAC).unwrap();
    Sim::start(SimConfig { authz: Some(authz), ..SimConfig::default() }).await.unwrap()
}

/// A client from a kubeconfig text, as theseus and kubectl read one.
async fn from_kubeconfig(text: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.unwrap();
    Client::try_from(config).unwrap()
}

/// 403 (`Some(message)`) or allowed (`None`) for listing pods in `default` and nodes.
async fn can_list(client: &Client) -> (Result<(), String>, Result<(), String>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let verdict = |r: Result<(), kube::Error>| r.map_err(|e| e.to_string());
    (
        verdict(pods.list(&ListParams::default()).await.map(drop)),
        verdict(nodes.list(&ListParams::default()).await.map(drop)),
    )
}

#[tokio::test]
async fn it_serves_https_for_127_0_0_1_and_localhost_with_its_own_ca() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    assert!(sim.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    let nodes = |client: Client| async move { Api::<Node>::all(client).list(&ListParams::default()).await };

    nodes(Client::try_from(client_config(&sim)).unwrap()).await.expect("a client that trusts the CA");
    let mut localhost = client_config(&sim);
    localhost.cluster_url = sim.url().replace("127.0.0.1", "localhost").parse().unwrap();
    nodes(Client::try_from(localhost).unwrap()).await.expect("the certificate names localhost too");

    // No CA given: the system roots do not know the simulator's.
    let untrusting = Client::try_from(kube::Config::new(sim.url().parse().unwrap())).unwrap();
    let err = nodes(untrusting).await.expect_err("an unknown authority is refused");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");

    // Another simulator's CA does not vouch for this one.
    let other = Sim::start(SimConfig::default()).await.unwrap();
    let mut wrong = client_config(&sim);
    wrong.root_cert = Some(vec![other.ca_der()]);
    assert!(nodes(Client::try_from(wrong).unwrap()).await.is_err());

    // Plain HTTP to the TLS port gets no API answer.
    let plain = sim.url().replace("https://", "http://");
    assert!(nodes(Client::try_from(kube::Config::new(plain.parse().unwrap())).unwrap()).await.is_err());
}

#[tokio::test]
async fn client_certificates_authenticate_their_cn_and_o_as_kube_apiserver_does() {
    let sim = rbac_sim().await;
    let cert_user = |user: &str, group: Option<&str>| {
        theseus_kube_sim::kubeconfig_cert_user(&sim.issue_client_cert(user, group).unwrap())
    };

    // CN=researcher: the user's Role applies, nothing more.
    let researcher = from_kubeconfig(&sim.kubeconfig(&cert_user("researcher", None), "default")).await;
    let (pods, nodes) = can_list(&researcher).await;
    pods.expect("researcher may list pods in default");
    let denied = nodes.expect_err("no ClusterRole for nodes");
    assert!(denied.contains("User \"researcher\" cannot list resource \"nodes\""), "{denied}");

    // O=system:masters is all-powerful, as kind's admin (whatever the CN).
    let admin =
        from_kubeconfig(&sim.kubeconfig(&cert_user("kubernetes-admin", Some("system:masters")), "default")).await;
    let (pods, nodes) = can_list(&admin).await;
    pods.unwrap();
    nodes.unwrap();

    // A certificate that names someone without grants: RBAC judges that user, not anonymous.
    let stranger = from_kubeconfig(&sim.kubeconfig(&cert_user("stranger", Some("team-x")), "default")).await;
    let denied = can_list(&stranger).await.0.expect_err("no grants");
    assert!(denied.contains("User \"stranger\""), "{denied}");

    // Bearer tokens still work over HTTPS; no credentials at all is the anonymous user.
    let token = from_kubeconfig(&sim.kubeconfig("{token: t-researcher}", "default")).await;
    can_list(&token).await.0.expect("the token's user");
    let anonymous = from_kubeconfig(&sim.kubeconfig("{}", "default")).await;
    let denied = can_list(&anonymous).await.0.expect_err("anonymous has no grants");
    assert!(denied.contains("User \"system:anonymous\""), "{denied}");
    let unknown = from_kubeconfig(&sim.kubeconfig("{token: t-nobody}", "default")).await;
    let denied = can_list(&unknown).await.0.expect_err("an unknown token");
    assert!(denied.contains("401") || denied.contains("Unauthorized"), "{denied}");
}

#[tokio::test]
async fn an_exec_credential_plugin_token_authenticates_its_user() {
    use std::os::unix::fs::PermissionsExt as _;
    let sim = rbac_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("credential.sh");
    std::fs::write(
        &plugin,
        "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\
         \"status\":{\"token\":\"t-researcher\"}}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let user = format!(
        "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {:?}, interactiveMode: Never}}}}",
        plugin.display().to_string()
    );
    let client = from_kubeconfig(&sim.kubeconfig(&user, "default")).await;
    let (pods, nodes) = can_list(&client).await;
    pods.expect("the plugin's token is researcher's");
    assert!(nodes.unwrap_err().contains("User \"researcher\""));
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_fails_the_handshake() {
    let sim = rbac_sim().await;
    let other = Sim::start(SimConfig::default()).await.unwrap();
    let forged = other.issue_client_cert("researcher", Some("system:masters")).unwrap();
    let client = from_kubeconfig(&sim.kubeconfig(&theseus_kube_sim::kubeconfig_cert_user(&forged), "default")).await;
    let (pods, nodes) = can_list(&client).await;
    assert!(pods.is_err() && nodes.is_err(), "{pods:?} {nodes:?}");
    assert!(!nodes.unwrap_err().contains("403"), "refused at the handshake, not by RBAC");
}

#[tokio::test]
async fn the_certificate_holds_the_listen_address_and_extra_names_and_no_other() {
    let config = SimConfig {
        listen: std::net::IpAddr::from([127, 0, 0, 2]),
        tls_names: vec!["api.sim.test".into()],
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await.unwrap();
    assert!(sim.url().starts_with("https://127.0.0.2:"), "{}", sim.url());
    let nodes = |config: kube::Config| async move {
        Api::<Node>::all(Client::try_from(config).unwrap()).list(&ListParams::default()).await
    };
    nodes(client_config(&sim)).await.expect("the listen address is in the certificate");
    let mut named = client_config(&sim);
    named.tls_server_name = Some("api.sim.test".into());
    nodes(named).await.expect("an extra name is in the certificate");
    // A stale kubeconfig naming another server: a name mismatch, refused by the client.
    let mut other = client_config(&sim);
    other.tls_server_name = Some("other.sim.test".into());
    let err = nodes(other).await.expect_err("a name the certificate does not hold");
    assert!(format!("{err:?}").contains("NotValidForName"), "{err:?}");
}
