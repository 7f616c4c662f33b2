//! How a request stands among a shared cluster's queues, as a backend with queues (Volcano)
//! measures it for `plan`: whether it fits now, only by reclaiming what other queues borrowed,
//! only by preempting lower-priority jobs of its own queue, later, or never; and each queue's
//! share. Plain data, shown by `plan` and carried by `plan --output json`.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use serde::Serialize;

/// The request among the queues of one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueShares {
    /// The resource weighed (`nvidia.com/gpu`).
    pub resource: String,
    /// The request's queue.
    pub queue: String,
    /// How the scheduler shares (`proportion`: deserved from weights; `capacity`: each queue's
    /// `spec.deserved`), and how theseus knows.
    pub model: String,
    /// The verdict.
    pub verdict: ShareVerdict,
    /// Every queue that could be read.
    pub queues: Vec<QueueRow>,
    /// What could not be read (RBAC), and so was not weighed: one sentence each.
    pub unknown: Vec<String>,
}

/// Whether and how the request fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShareVerdict {
    /// It fits now: its queue's share and the nodes have room.
    FitsNow {
        /// Why, in one sentence.
        reason: String,
    },
    /// It fits only once the scheduler reclaims what other queues hold beyond their share.
    Reclaim {
        /// Queues and how much would be taken from each.
        from: Vec<Taken>,
        /// Why, in one sentence.
        reason: String,
    },
    /// It fits only by preempting lower-priority jobs of its own queue.
    Preempt {
        /// The jobs, lowest priority first.
        victims: Vec<Victim>,
        /// Why, in one sentence.
        reason: String,
    },
    /// It does not fit now and nothing would be taken for it: it waits for others to finish.
    Waits {
        /// Why, in one sentence.
        reason: String,
    },
    /// It can never fit (more than the queue's cap or the cluster).
    Never {
        /// Why, in one sentence.
        reason: String,
    },
    /// Not enough could be read to say.
    Unknown {
        /// What is missing.
        reason: String,
    },
}

impl ShareVerdict {
    /// The verdict as one line.
    pub fn describe(&self) -> String {
        match self {
            ShareVerdict::FitsNow { reason } => format!("fits now: {reason}"),
            ShareVerdict::Reclaim { from, reason } => {
                let from: Vec<_> = from.iter().map(|t| format!("{} from queue {}", show(t.amount), t.queue)).collect();
                format!("fits only by reclaiming {}: {reason}", from.join(", "))
            }
            ShareVerdict::Preempt { victims, reason } => {
                let jobs: Vec<_> = victims
                    .iter()
                    .map(|v| {
                        format!(
                            "{}/{} ({}, priority {} {}, {})",
                            v.namespace,
                            v.job,
                            v.queue,
                            v.priority_class.as_deref().unwrap_or("none"),
                            v.priority,
                            show(v.amount)
                        )
                    })
                    .collect();
                format!("fits only by preempting {}: {reason}", jobs.join(", "))
            }
            ShareVerdict::Waits { reason } => format!("does not fit now: {reason}"),
            ShareVerdict::Never { reason } => format!("never fits: {reason}"),
            ShareVerdict::Unknown { reason } => format!("unknown: {reason}"),
        }
    }
}

/// What a reclaim would take from one queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Taken {
    /// The queue.
    pub queue: String,
    /// How much of the resource.
    pub amount: f64,
}

/// A job a preemption would evict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    /// Its namespace.
    pub namespace: String,
    /// Its PodGroup's name (the job's).
    pub job: String,
    /// Its queue.
    pub queue: String,
    /// Its PriorityClass (`None`: none named).
    pub priority_class: Option<String>,
    /// The priority value.
    pub priority: i32,
    /// What it holds of the resource.
    pub amount: f64,
}

/// One queue's share of the resource. `None`: not set (or not known).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueRow {
    /// Queue name.
    pub name: String,
    /// `status.state`.
    pub state: Option<String>,
    /// `spec.weight`.
    pub weight: u32,
    /// `spec.capability`: the hard cap.
    pub capability: Option<f64>,
    /// The share the scheduler gives it (with the request counted in its queue).
    pub deserved: Option<f64>,
    /// `spec.guarantee`: never reclaimed below it.
    pub guarantee: Option<f64>,
    /// `status.allocated`.
    pub allocated: f64,
    /// What it is owed: share it does not hold while it has pending work.
    pub owed: f64,
    /// What it holds beyond its share (borrowed, reclaimable unless `reclaimable: false`).
    pub borrowed: f64,
    /// `spec.reclaimable` (absent: true).
    pub reclaimable: bool,
    /// What its pending jobs need (`None`: its jobs could not be read).
    pub pending: Option<f64>,
    /// Its jobs (that could be read) per PriorityClass: `(class or "none", jobs)`.
    pub classes: Vec<(String, u32)>,
}

/// A count as text: whole numbers without a fraction.
pub fn show(value: f64) -> String {
    // An empty sum is -0.0: shown as 0.
    let value = value + 0.0;
    if value.fract() == 0.0 { format!("{value:.0}") } else { format!("{value:.2}") }
}

/// The queues as a table, one row each, with a header.
pub fn render_table(shares: &QueueShares) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), show);
    let mut rows = vec![[
        "queue".to_owned(),
        "weight".into(),
        "capability".into(),
        "deserved".into(),
        "guarantee".into(),
        "allocated".into(),
        "owed".into(),
        "borrowed".into(),
        "pending".into(),
        "priority classes".into(),
    ]];
    for q in &shares.queues {
        let mut name = q.name.clone();
        if q.name == shares.queue {
            name.push('*');
        }
        if !q.reclaimable {
            name.push_str(" (not reclaimable)");
        }
        let classes = if q.pending.is_none() && q.classes.is_empty() {
            "unknown".to_owned()
        } else {
            q.classes.iter().map(|(c, n)| format!("{c} x{n}")).collect::<Vec<_>>().join(", ")
        };
        rows.push([
            name,
            q.weight.to_string(),
            opt(q.capability),
            opt(q.deserved),
            opt(q.guarantee),
            show(q.allocated),
            show(q.owed),
            show(q.borrowed),
            opt(q.pending),
            classes,
        ]);
    }
    let mut widths = [0usize; 10];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<_> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
