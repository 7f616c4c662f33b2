//! The GCE metadata server: on the host (`metadata_host`, the credentials path of a GCE VM) and
//! inside every worker at `169.254.169.254:80`, answering under `/computeMetadata/v1/` only
//! requests that carry `Metadata-Flavor: Google`, and marking its answers with that header
//! (what google-auth's `_metadata.ping` and `get` check; read, not run). Inside a worker it
//! serves what a TPU VM's metadata gives (contract §3): `instance/attributes/` with
//! `agent-worker-number`, `worker-network-endpoints`, `accelerator-type`, `ssh-keys` and the
//! node's own metadata; `instance/name`, `instance/zone`, `project/project-id` and the default
//! service account's token. `?recursive=true`, `?wait_for_change` and `?alt=json` are not
//! modelled (the plain text of one key is what JAX's TPU cluster detection reads).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::auth::Auth;

/// The numeric project the simulator reports (one for every project).
pub(crate) const PROJECT_NUMBER: &str = "123456789012";

/// What one worker's metadata server knows of its VM.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) name: String,
    pub(crate) id: String,
    pub(crate) zone: String,
    pub(crate) ip: String,
    pub(crate) email: String,
    pub(crate) attributes: BTreeMap<String, String>,
}

/// A metadata server's context: the host's (no instance) or one worker's.
pub(crate) struct Context {
    pub(crate) project: String,
    pub(crate) auth: Arc<Auth>,
    pub(crate) instance: Option<Instance>,
}

/// Serves `listener` until the task is aborted.
pub(crate) async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Context>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let ctx = ctx.clone();
                async move { Ok::<_, std::convert::Infallible>(respond(&ctx, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn respond(ctx: &Context, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let flavor = req.headers().get("metadata-flavor").and_then(|v| v.to_str().ok());
    let (status, content_type, body) = answer(ctx, req.uri().path(), flavor);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert("metadata-flavor", header::HeaderValue::from_static("Google"));
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    resp
}

fn answer(ctx: &Context, path: &str, flavor: Option<&str>) -> (StatusCode, &'static str, String) {
    let text = |s: String| (StatusCode::OK, "application/text", s);
    let not_found = || (StatusCode::NOT_FOUND, "text/html", format!("404 Not Found: {path}\n"));
    if path == "/" || path.is_empty() {
        return text("computeMetadata/\n".into());
    }
    let Some(rest) =
        path.strip_prefix("/computeMetadata/v1/").or_else(|| (path == "/computeMetadata/v1").then_some(""))
    else {
        return not_found();
    };
    if flavor != Some("Google") {
        return (StatusCode::FORBIDDEN, "text/html", "Missing Metadata-Flavor:Google header.\n".into());
    }
    let instance = ctx.instance.as_ref();
    let email =
        instance.map_or_else(|| format!("{}-compute@developer.gserviceaccount.com", ctx.project), |i| i.email.clone());
    match rest {
        "" => text("instance/\nproject/\n".into()),
        "project/project-id" => text(ctx.project.clone()),
        "project/numeric-project-id" => text(PROJECT_NUMBER.into()),
        "instance/service-accounts/" => text(format!("default/\n{email}/\n")),
        "instance/service-accounts/default/email" => text(email),
        "instance/service-accounts/default/scopes" => text(format!("{}\n", crate::auth::CLOUD_PLATFORM)),
        "instance/service-accounts/default/token" => (StatusCode::OK, "application/json", ctx.auth.issue().to_string()),
        _ => match (instance, rest) {
            (Some(i), "instance/name") => text(i.name.clone()),
            // GCE's zonal DNS name, which the worker's /etc/hosts also resolves.
            (Some(i), "instance/hostname") => text(format!("{}.{}.c.{}.internal", i.name, i.zone, ctx.project)),
            (Some(i), "instance/id") => text(i.id.clone()),
            (Some(i), "instance/zone") => text(format!("projects/{PROJECT_NUMBER}/zones/{}", i.zone)),
            (Some(i), "instance/network-interfaces/0/ip") => text(i.ip.clone()),
            (Some(i), "instance/attributes/") => {
                text(i.attributes.keys().map(|k| format!("{k}\n")).collect::<String>())
            }
            (Some(i), other) => match other.strip_prefix("instance/attributes/").and_then(|k| i.attributes.get(k)) {
                Some(value) => text(value.clone()),
                None => not_found(),
            },
            (None, _) => not_found(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_need_the_flavor_header_and_name_the_worker() {
        let attributes = BTreeMap::from([("agent-worker-number".to_owned(), "1".to_owned())]);
        let instance = Instance {
            name: "t1v-n-0a1b2c3d-w-1".into(),
            id: "1".into(),
            zone: "us-central2-b".into(),
            ip: "10.1.2.3".into(),
            email: "sa@p.iam.gserviceaccount.com".into(),
            attributes,
        };
        let ctx = Context { project: "p".into(), auth: Arc::new(Auth::default()), instance: Some(instance) };
        let get = |path: &str| answer(&ctx, path, Some("Google"));
        assert_eq!(answer(&ctx, "/computeMetadata/v1/project/project-id", None).0, StatusCode::FORBIDDEN);
        assert_eq!(get("/computeMetadata/v1/project/project-id").2, "p");
        assert_eq!(get("/computeMetadata/v1/instance/attributes/agent-worker-number").2, "1");
        assert_eq!(get("/computeMetadata/v1/instance/attributes/nope").0, StatusCode::NOT_FOUND);
        assert_eq!(get("/computeMetadata/v1/instance/zone").2, "projects/123456789012/zones/us-central2-b");
        assert_eq!(get("/computeMetadata/v1/instance/hostname").2, "t1v-n-0a1b2c3d-w-1.us-central2-b.c.p.internal");
        let token: serde_json::Value =
            serde_json::from_str(&get("/computeMetadata/v1/instance/service-accounts/default/token").2).unwrap();
        assert!(ctx.auth.check(Some(&format!("Bearer {}", token["access_token"].as_str().unwrap()))).is_ok());
        let host = Context { project: "p".into(), auth: Arc::new(Auth::default()), instance: None };
        assert_eq!(
            answer(&host, "/computeMetadata/v1/instance/attributes/agent-worker-number", Some("Google")).0,
            StatusCode::NOT_FOUND
        );
    }
}
