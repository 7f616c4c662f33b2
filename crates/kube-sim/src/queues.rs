//! Volcano's queue controller: `bus.volcano.sh` Commands that open or close a queue (what
//! `vcctl queue operate --action open|close` creates), and the queue states they lead to.
//!
//! Upstream origins (volcano-sh/volcano): `pkg/controllers/queue/queue_controller.go`
//! (`handleCommand`: the command is deleted once handled, then the action is run),
//! `pkg/controllers/queue/state/{open,closing,closed}.go` (the state machine: `CloseQueue` on an
//! Open queue with PodGroups makes it `Closing`, without any `Closed`; a Closing queue whose
//! PodGroups are gone becomes `Closed`; `OpenQueue` makes it `Open`) and
//! `pkg/controllers/queue/queue_controller_action.go` (`openQueue`, `closeQueue`, `syncQueue`).
//!
//! Still different: Commands are not schema-checked (their CRD is not vendored); job Commands
//! (`AbortJob`, `ResumeJob`, ...) are deleted without effect.

use serde_json::{Value, json};

use crate::discovery::known;
use crate::jobpods::str_at;
use crate::selector::Selectors;
use crate::store::{Propagation, Store};

/// Runs every pending Command, then moves Closing queues whose PodGroups are gone to Closed.
pub(crate) fn reconcile(store: &Store) {
    let (commands, _) = store.list(known::commands(), None, &Selectors::default());
    for command in commands {
        let (ns, name) = (str_at(&command, "/metadata/namespace"), str_at(&command, "/metadata/name"));
        // Handled once: whoever deletes it first runs it.
        if store.delete(known::commands(), ns, name, Propagation::Background).is_err() {
            continue;
        }
        if str_at(&command, "/target/kind") != "Queue" {
            continue;
        }
        let queue = str_at(&command, "/target/name");
        match str_at(&command, "/action") {
            "OpenQueue" => set_state(store, queue, "Open"),
            "CloseQueue" => {
                let state = if podgroups_in(store, queue) > 0 { "Closing" } else { "Closed" };
                set_state(store, queue, state);
            }
            _ => {}
        }
    }
    let (queues, _) = store.list(known::queues(), None, &Selectors::default());
    for q in queues {
        let name = str_at(&q, "/metadata/name");
        if str_at(&q, "/status/state") == "Closing" && podgroups_in(store, name) == 0 {
            set_state(store, name, "Closed");
        }
    }
}

fn set_state(store: &Store, queue: &str, state: &str) {
    let _ = store.update(known::queues(), "", queue, |q| q["status"]["state"] = json!(state));
}

/// PodGroups of any namespace in `queue`.
fn podgroups_in(store: &Store, queue: &str) -> usize {
    let (groups, _) = store.list(known::podgroups(), None, &Selectors::default());
    groups.iter().filter(|g| g.pointer("/spec/queue").and_then(Value::as_str) == Some(queue)).count()
}
