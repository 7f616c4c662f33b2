//! What a backend logs about a log stream it follows (the Volcano follower losing and regaining
//! contact with the API server: `tracing` warnings of `theseus_backend_volcano::pod_log`), also
//! sent to whoever listens ([`subscribe`]). `theseus logs -f` shows these lines on stderr;
//! `theseus ui` also shows them in a followed run's log as notes. Installed with the program's
//! tracing ([`layer`]); with nobody listening, an event costs one check.

use std::fmt::Debug;
use std::sync::OnceLock;

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer};

/// Where the follower's lines come from.
const TARGET: &str = "theseus_backend_volcano::pod_log";

fn channel() -> &'static broadcast::Sender<String> {
    static CHANNEL: OnceLock<broadcast::Sender<String>> = OnceLock::new();
    CHANNEL.get_or_init(|| broadcast::channel(64).0)
}

/// The lines logged from now on.
pub(crate) fn subscribe() -> broadcast::Receiver<String> {
    channel().subscribe()
}

/// The layer that sends the follower's warnings to [`subscribe`]rs, with its own filter.
pub(crate) fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let only = tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::WARN);
    NotesLayer.with_filter(only)
}

/// Sends the follower's warnings to [`subscribe`]rs.
struct NotesLayer;

impl<S: tracing::Subscriber> Layer<S> for NotesLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let wanted = meta.target() == TARGET && matches!(*meta.level(), tracing::Level::WARN | tracing::Level::ERROR);
        if !wanted || channel().receiver_count() == 0 {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let _ = channel().send(message.0);
    }
}

/// The `message` field of an event.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
