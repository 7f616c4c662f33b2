//! The process's interrupt: the one place where a signal the program received (SIGINT, SIGTERM)
//! becomes visible to long operations that must clean up before the program exits.
//!
//! The program installs its signal handlers once (the CLI does, at start) and calls [`trigger`];
//! library code never installs a handler of its own (a tokio handler, once installed, stays for
//! the life of the process and would swallow the signal). Operations that create something and
//! must take it back on an interrupt (shipping code, starting a helper pod) select on [`wait`],
//! clean up, and return an error; the program then reports the signal and exits.

use std::sync::OnceLock;

use tokio::sync::watch;

/// A signal that asks the program to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptSignal {
    /// SIGINT (Ctrl-C).
    Int,
    /// SIGTERM (`kill`, `timeout`, a service manager).
    Term,
}

impl InterruptSignal {
    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            InterruptSignal::Int => "SIGINT",
            InterruptSignal::Term => "SIGTERM",
        }
    }

    /// The exit status of a program stopped by this signal, as shells report it: 128 + number.
    pub fn exit_code(self) -> u8 {
        match self {
            InterruptSignal::Int => 130,
            InterruptSignal::Term => 143,
        }
    }
}

/// An interrupt flag that wakes waiters; the program has one, [`global`].
#[derive(Debug)]
pub struct Interrupt {
    tx: watch::Sender<Option<InterruptSignal>>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt { tx: watch::Sender::new(None) }
    }
}

impl Interrupt {
    /// A flag nobody has triggered.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Records that the program was asked to stop. The first signal counts; later ones are
    /// ignored here (the program decides what a second signal does).
    pub fn trigger(&self, signal: InterruptSignal) {
        self.tx.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(signal);
            true
        });
    }

    /// The signal received so far, if any.
    pub fn triggered(&self) -> Option<InterruptSignal> {
        *self.tx.borrow()
    }

    /// Resolves once the program was asked to stop (at once when it already was).
    pub async fn wait(&self) -> InterruptSignal {
        let mut rx = self.tx.subscribe();
        let seen = rx.wait_for(Option::is_some).await.ok().and_then(|signal| *signal);
        match seen {
            Some(signal) => signal,
            // The sender lives as long as `self`: not reached.
            None => std::future::pending().await,
        }
    }
}

/// The program's interrupt, which the CLI's signal handler triggers.
pub fn global() -> &'static Interrupt {
    static GLOBAL: OnceLock<Interrupt> = OnceLock::new();
    GLOBAL.get_or_init(Interrupt::new)
}

/// [`Interrupt::trigger`] of the [`global`] interrupt.
pub fn trigger(signal: InterruptSignal) {
    global().trigger(signal);
}

/// [`Interrupt::triggered`] of the [`global`] interrupt.
pub fn triggered() -> Option<InterruptSignal> {
    global().triggered()
}

/// [`Interrupt::wait`] of the [`global`] interrupt.
pub async fn wait() -> InterruptSignal {
    global().wait().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_signal_wakes_every_waiter_and_stays() {
        let interrupt = std::sync::Arc::new(Interrupt::new());
        let waiter = tokio::spawn({
            let interrupt = interrupt.clone();
            async move { interrupt.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(interrupt.triggered(), None);
        interrupt.trigger(InterruptSignal::Term);
        interrupt.trigger(InterruptSignal::Int);
        assert_eq!(waiter.await.unwrap(), InterruptSignal::Term);
        assert_eq!(interrupt.triggered(), Some(InterruptSignal::Term));
        assert_eq!(interrupt.wait().await.exit_code(), 143);
    }
}
