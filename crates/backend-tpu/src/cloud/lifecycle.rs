//! The VM's lifecycle over the API: [`ensure_ready`] (reuse, wait, create through
//! `nodes.create` or a spot queued resource, recreate after a preemption, clean up a failed
//! creation) and [`delete`], with the waits on long-running operations, queued resources and
//! node states, telling the caller each new state once.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;

use super::node::{Node, RUN_LABEL, node_to_create};
use super::{Cloud, Ensured, Progress};
use crate::api::error::{Context, from_status};
use crate::api::types::{NodeSpec, Operation, QueuedResource, QueuedTpu, Status};
use crate::api::{Client, ErrorKind, TpuError};

/// Node states that end on their own: wait for them.
const PASSING: &[&str] =
    &["CREATING", "STARTING", "RESTARTING", "REPAIRING", "REIMAGING", "UNHIDING", "STATE_UNSPECIFIED"];

/// Queued-resource states still on their way to `ACTIVE`.
const QUEUED: &[&str] = &["CREATING", "ACCEPTED", "PROVISIONING", "WAITING_FOR_RESOURCES", "STATE_UNSPECIFIED", ""];

/// Calls `progress` with each line once, not on every poll.
struct Reporter<'a> {
    progress: &'a Progress<'a>,
    last: String,
}

impl Reporter<'_> {
    fn say(&mut self, line: String) {
        if line != self.last {
            (self.progress)(&line);
            self.last = line;
        }
    }
}

fn gcloud_hint(cloud: &Cloud, verb: &str) -> String {
    format!("gcloud compute tpus tpu-vm {verb} {} --zone {}", cloud.name, cloud.settings.zone)
}

fn timeout(cloud: &Cloud, what: &str, state: &str) -> TpuError {
    TpuError::new(
        ErrorKind::Transient,
        format!(
            "TPU VM {} {what} within {} min (last state: {state}); try again later or in another zone",
            cloud.name,
            cloud.waits.ready.as_secs().div_ceil(60)
        ),
    )
}

/// See [`Cloud::ensure_ready`].
pub(super) async fn ensure_ready(
    cloud: &Cloud,
    confirmed: bool,
    labels: &BTreeMap<String, String>,
    ssh_keys: &[String],
    progress: &Progress<'_>,
) -> Result<Ensured, TpuError> {
    let client = cloud.client().await?;
    let name = &cloud.name;
    let mut reporter = Reporter { progress, last: String::new() };
    let deadline = Instant::now() + cloud.waits.ready;
    let mut recreated = false;
    loop {
        let node = client.get_node(name).await?.map(Node::from);
        match node {
            Some(node) if node.is_ready() => return Ok(Ensured { node, created: recreated }),
            None => {
                if !confirmed {
                    return Err(TpuError::new(
                        ErrorKind::Refused,
                        format!(
                            "TPU VM {name} does not exist and creating it was not confirmed: run `theseus plan` to see what it creates, then submit with `--yes` (or answer y)"
                        ),
                    ));
                }
                if let Some(node) = create(cloud, client, labels, ssh_keys, &mut reporter, deadline).await? {
                    return Ok(Ensured { node, created: true });
                }
                // Someone else's create of the same id won the race: follow that VM.
            }
            Some(node) if node.is_lost() => {
                if !node.created_by_theseus {
                    return Err(TpuError::new(
                        ErrorKind::Refused,
                        format!(
                            "TPU VM {name} is {} and theseus did not create it (no label theseus-created=true), so theseus does not delete it: delete it (`{}`) and submit again",
                            node.state,
                            gcloud_hint(cloud, "delete")
                        ),
                    ));
                }
                if !confirmed {
                    return Err(TpuError::new(
                        ErrorKind::Refused,
                        format!(
                            "TPU VM {name} is {} and creating it again was not confirmed: submit with `--yes` (or answer y)",
                            node.state
                        ),
                    ));
                }
                reporter.say(format!("TPU VM {name} is {}: deleting it to create it again", node.state));
                delete(cloud, progress).await?;
                recreated = true;
                continue;
            }
            Some(node) if matches!(node.state.as_str(), "STOPPED" | "STOPPING" | "HIDDEN" | "HIDING") => {
                return Err(TpuError::new(
                    ErrorKind::Refused,
                    format!(
                        "TPU VM {name} is {}; theseus does not start VMs: start it (`{}`) or delete it, then submit again",
                        node.state,
                        gcloud_hint(cloud, "start")
                    ),
                ));
            }
            Some(node) => {
                // CREATING, STARTING, REPAIRING, DELETING (then created anew), ...
                if Instant::now() >= deadline {
                    return Err(timeout(cloud, "did not become READY", &node.state_text()));
                }
                reporter.say(format!("TPU VM {name}: {}", node.state_text()));
            }
        }
        tokio::time::sleep(cloud.waits.poll).await;
    }
}

/// Creates the VM and waits for `READY`; `Ok(None)` when a VM of that id appeared meanwhile
/// (another client's create). A failure deletes what this call made.
async fn create(
    cloud: &Cloud,
    client: &Client,
    labels: &BTreeMap<String, String>,
    ssh_keys: &[String],
    reporter: &mut Reporter<'_>,
    deadline: Instant,
) -> Result<Option<Node>, TpuError> {
    cloud.check_creatable()?;
    let name = &cloud.name;
    let body = node_to_create(&cloud.settings, labels, ssh_keys);
    let ctx = client.context(format!("create TPU VM {name}"), &cloud.settings.accelerator_type);
    reporter.say(format!("creating {}", cloud.creation_text(client.project())));
    let made = if cloud.settings.spot {
        let resource = QueuedResource {
            tpu: Some(QueuedTpu {
                node_spec: vec![NodeSpec { parent: client.parent(), node_id: name.clone(), node: body }],
            }),
            spot: Some(json!({})),
            ..QueuedResource::default()
        };
        match client.create_queued_resource(name, &resource).await {
            Ok(op) => watch_queued(cloud, client, Some(op), &ctx, reporter, deadline).await,
            // A queued resource of that id exists (an earlier, interrupted submit): follow it,
            // or replace it when it ended without a VM.
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                let existing = client.get_queued_resource(name).await?;
                let stale =
                    existing.as_ref().is_some_and(|q| matches!(q.state_name(), "FAILED" | "SUSPENDED" | "SUSPENDING"));
                // Made by this run (an earlier attempt whose answer was lost) or by another
                // submit meanwhile: that one's VM is followed, not owned (nor cleaned up).
                let ours = existing.as_ref().and_then(queued_run).is_some_and(|run| Some(run) == labels.get(RUN_LABEL));
                if !stale && !ours {
                    return watch_queued(cloud, client, None, &ctx, reporter, deadline).await.map(|_| None);
                }
                if stale {
                    reporter
                        .say(format!("TPU VM {name}: replacing its earlier queued resource, which ended without a VM"));
                    if let Some(op) = client.delete_queued_resource(name, true).await? {
                        wait_deleted_op(cloud, client, op, &ctx, reporter, deadline).await?;
                    }
                    match client.create_queued_resource(name, &resource).await {
                        Ok(op) => watch_queued(cloud, client, Some(op), &ctx, reporter, deadline).await,
                        Err(e) => return Err(e),
                    }
                } else {
                    watch_queued(cloud, client, None, &ctx, reporter, deadline).await
                }
            }
            // No answer: it may have been made all the same.
            Err(e) if e.is_transient() => Err(e),
            // Refused at once (quota, permission, bad argument): nothing was made.
            Err(e) => return Err(e),
        }
    } else {
        match client.create_node(name, &body).await {
            Ok(op) => match wait_operation(cloud, client, op, &ctx, reporter, deadline).await {
                Ok(_) => wait_node_ready(cloud, client, reporter, deadline).await,
                Err(e) => Err(e),
            },
            // The node exists: made by this create when an earlier attempt's answer was lost
            // (its labels name this run), else by someone else meanwhile.
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                let ours = client.get_node(name).await?.map(Node::from).is_some_and(|n| {
                    n.created_by_theseus && n.run().is_some() && n.run() == labels.get(RUN_LABEL).map(String::as_str)
                });
                if !ours {
                    return Ok(None);
                }
                wait_node_ready(cloud, client, reporter, deadline).await
            }
            Err(e) if e.is_transient() => Err(e),
            Err(e) => return Err(e),
        }
    };
    match made {
        Ok(node) => Ok(Some(node)),
        Err(error) => {
            // Only what this run made: a VM labelled with another run is someone else's.
            let ours = labels.get(RUN_LABEL).map(String::as_str);
            let foreign = client.get_node(name).await.ok().flatten().map(Node::from).is_some_and(|n| n.run() != ours);
            if foreign {
                return Err(error);
            }
            reporter.say(format!("creating TPU VM {name} failed; deleting what it made, if anything"));
            let cleanup = delete(cloud, reporter.progress).await;
            Err(match cleanup {
                Ok(_) => error,
                Err(e) => TpuError::new(
                    error.kind,
                    format!(
                        "{error}; deleting what was made failed too ({e}): delete it (`{}`)",
                        gcloud_hint(cloud, "delete")
                    ),
                ),
            })
        }
    }
}

/// The `theseus-run` label of the node a queued resource makes.
fn queued_run(resource: &QueuedResource) -> Option<&String> {
    resource.tpu.as_ref()?.node_spec.first()?.node.labels.get(RUN_LABEL)
}

/// Follows a spot queued resource to `ACTIVE` and its node to `READY`.
async fn watch_queued(
    cloud: &Cloud,
    client: &Client,
    op: Option<Operation>,
    ctx: &Context,
    reporter: &mut Reporter<'_>,
    deadline: Instant,
) -> Result<Node, TpuError> {
    let name = &cloud.name;
    if let Some(op) = op {
        wait_operation(cloud, client, op, ctx, reporter, deadline).await?;
    }
    loop {
        let Some(resource) = client.get_queued_resource(name).await? else {
            return Err(TpuError::new(
                ErrorKind::Other,
                format!("the queued resource of TPU VM {name} disappeared before its VM was made"),
            ));
        };
        let state = resource.state_name().to_owned();
        match state.as_str() {
            "ACTIVE" => return wait_node_ready(cloud, client, reporter, deadline).await,
            "FAILED" => {
                let status = resource.failure().unwrap_or(Status {
                    code: 2,
                    message: "the queued resource FAILED without saying why".into(),
                    details: vec![],
                });
                return Err(from_status(&status, ctx));
            }
            s if QUEUED.contains(&s) => {
                if Instant::now() >= deadline {
                    return Err(timeout(cloud, "was not provisioned (spot capacity)", &state));
                }
                reporter.say(format!("TPU VM {name}: queued resource {state}"));
            }
            _ => {
                return Err(TpuError::new(
                    ErrorKind::Other,
                    format!("the queued resource of TPU VM {name} is {state} before its VM was made"),
                ));
            }
        }
        tokio::time::sleep(cloud.waits.poll).await;
    }
}

/// Polls an operation until `done`; its error becomes one line.
async fn wait_operation(
    cloud: &Cloud,
    client: &Client,
    mut op: Operation,
    ctx: &Context,
    reporter: &mut Reporter<'_>,
    deadline: Instant,
) -> Result<Operation, TpuError> {
    loop {
        if op.done {
            return match &op.error {
                Some(status) => Err(from_status(status, ctx)),
                None => Ok(op),
            };
        }
        if let Some(detail) = op.status_detail() {
            reporter.say(format!("TPU VM {}: {detail}", cloud.name));
        }
        if Instant::now() >= deadline {
            return Err(TpuError::new(
                ErrorKind::Transient,
                format!("{} did not finish in time (operation {})", ctx.action, op.name),
            ));
        }
        tokio::time::sleep(cloud.waits.poll).await;
        if op.name.is_empty() {
            return Err(TpuError::new(
                ErrorKind::Other,
                format!("{}: the API answered an operation without a name", ctx.action),
            ));
        }
        op = match client.get_operation(&op.name).await {
            Ok(op) => op,
            // The API forgot the operation (it keeps them for a while only): what it was about
            // is read from the resource itself by the caller's next step.
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(op),
            Err(e) => return Err(e),
        };
    }
}

/// Polls the node until `READY`; a state that will not lead there is an error.
async fn wait_node_ready(
    cloud: &Cloud,
    client: &Client,
    reporter: &mut Reporter<'_>,
    deadline: Instant,
) -> Result<Node, TpuError> {
    let name = &cloud.name;
    loop {
        let Some(node) = client.get_node(name).await?.map(Node::from) else {
            return Err(TpuError::new(
                ErrorKind::Other,
                format!("TPU VM {name} disappeared while it was being created"),
            ));
        };
        if node.is_ready() {
            reporter.say(format!(
                "TPU VM {name}: READY ({} worker{})",
                node.workers.len(),
                if node.workers.len() == 1 { "" } else { "s" }
            ));
            return Ok(node);
        }
        if !PASSING.contains(&node.state.as_str()) {
            return Err(TpuError::new(
                ErrorKind::Other,
                format!("TPU VM {name} became {} while it was being created", node.state_text()),
            ));
        }
        if Instant::now() >= deadline {
            return Err(timeout(cloud, "did not become READY", &node.state_text()));
        }
        reporter.say(format!("TPU VM {name}: {}", node.state_text()));
        tokio::time::sleep(cloud.waits.poll).await;
    }
}

/// See [`Cloud::delete`].
pub(super) async fn delete(cloud: &Cloud, progress: &Progress<'_>) -> Result<bool, TpuError> {
    let client = cloud.client().await?;
    let name = &cloud.name;
    let mut reporter = Reporter { progress, last: String::new() };
    let deadline = Instant::now() + cloud.waits.delete;
    let ctx = client.context(format!("delete TPU VM {name}"), "");
    let node = client.get_node(name).await?.map(Node::from);
    // A spot VM's queued resource goes with it (`force` deletes its node too); a queued resource
    // without a node yet (still waiting for capacity) is deleted as well.
    let queued = match &node {
        Some(n) => n.queued_resource.clone(),
        None if cloud.settings.spot => client.get_queued_resource(name).await?.map(|_| name.clone()),
        None => None,
    };
    if node.is_none() && queued.is_none() {
        return Ok(false);
    }
    reporter.say(format!("deleting TPU VM {name}"));
    if let Some(id) = &queued
        && let Some(op) = client.delete_queued_resource(id, true).await?
    {
        wait_deleted_op(cloud, client, op, &ctx, &mut reporter, deadline).await?;
    }
    if node.as_ref().is_some_and(|n| n.state != "DELETING")
        && queued.is_none()
        && let Some(op) = client.delete_node(name).await?
    {
        wait_deleted_op(cloud, client, op, &ctx, &mut reporter, deadline).await?;
    }
    // The operation is done when the API says so; the node may still show DELETING for a while.
    while let Some(node) = client.get_node(name).await?.map(Node::from) {
        if Instant::now() >= deadline {
            return Err(TpuError::new(
                ErrorKind::Transient,
                format!(
                    "TPU VM {name} was still {} after {} min; check it (`{}`)",
                    node.state,
                    cloud.waits.delete.as_secs().div_ceil(60),
                    gcloud_hint(cloud, "describe")
                ),
            ));
        }
        reporter.say(format!("TPU VM {name}: {}", node.state_text()));
        tokio::time::sleep(cloud.waits.poll).await;
    }
    reporter.say(format!("TPU VM {name} deleted"));
    Ok(true)
}

/// A deletion's operation; one that says the thing is already gone counts as done.
async fn wait_deleted_op(
    cloud: &Cloud,
    client: &Client,
    op: Operation,
    ctx: &Context,
    reporter: &mut Reporter<'_>,
    deadline: Instant,
) -> Result<(), TpuError> {
    match wait_operation(cloud, client, op, ctx, reporter, deadline).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
