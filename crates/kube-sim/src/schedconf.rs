//! The Volcano scheduler's configuration, as a site writes `volcano-scheduler.conf`: the
//! `actions` a session runs, in order, and the `tiers` of plugins with their `enable*` switches
//! and `arguments` (pkg/scheduler/conf/scheduler_conf.go `SchedulerConfiguration` and
//! `PluginOption`; defaults from pkg/scheduler/plugins/defaults.go `ApplyPluginConfDefaults`:
//! every switch left out is on). Read, not run.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use serde_json::Value;

/// The chart's default `volcano-scheduler.conf` of Volcano v1.15.1
/// (installer/helm/chart/volcano/config/volcano-scheduler.conf).
pub const DEFAULT_CONF: &str = "\
actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
";

/// The actions the simulator runs. `backfill` is accepted and does nothing of its own: the
/// simulator's allocate already places pods without requests.
const ACTIONS: [&str; 5] = ["enqueue", "allocate", "backfill", "preempt", "reclaim"];

/// One plugin of a tier.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginOption {
    /// The plugin's name (`priority`, `gang`, `proportion`, ...).
    pub name: String,
    /// `enablePreemptable`: whether its PreemptableFn votes in `preempt`.
    pub preemptable: bool,
    /// `enableReclaimable`: whether its ReclaimableFn votes in `reclaim`.
    pub reclaimable: bool,
    /// `arguments.overcommit-factor` of the `overcommit` plugin (default 1.2).
    pub overcommit_factor: Option<f64>,
}

/// A parsed scheduler configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConf {
    /// The actions of a session, in order.
    pub actions: Vec<String>,
    /// The tiers, each a list of plugins in order.
    pub tiers: Vec<Vec<PluginOption>>,
}

impl Default for SchedulerConf {
    fn default() -> Self {
        Self::parse(DEFAULT_CONF).unwrap_or(SchedulerConf { actions: Vec::new(), tiers: Vec::new() })
    }
}

fn flag(plugin: &Value, key: &str) -> Result<bool, String> {
    match plugin.get(key) {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("`{key}` of plugin `{}` is true or false, not {other}", plugin["name"])),
    }
}

impl SchedulerConf {
    /// Parses the YAML text of a `volcano-scheduler.conf`.
    ///
    /// # Errors
    /// A message naming the key that is wrong and what it takes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("the scheduler conf is not YAML: {e}"))?;
        let actions_text = doc
            .get("actions")
            .and_then(Value::as_str)
            .ok_or("the scheduler conf needs `actions: \"enqueue, allocate, backfill\"` (a comma-separated string)")?;
        let mut actions = Vec::new();
        for action in actions_text.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            if !ACTIONS.contains(&action) {
                return Err(format!(
                    "action `{action}` of `actions` is not simulated (the simulator runs {})",
                    ACTIONS.join(", ")
                ));
            }
            actions.push(action.to_owned());
        }
        let mut tiers = Vec::new();
        for (i, tier) in doc.get("tiers").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let mut plugins = Vec::new();
            for plugin in tier.get("plugins").and_then(Value::as_array).into_iter().flatten() {
                let name = plugin
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("a plugin of `tiers[{i}].plugins` has no `name`"))?;
                let factor = match plugin.pointer("/arguments/overcommit-factor") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(
                        v.as_f64()
                            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                            .ok_or_else(|| format!("`overcommit-factor` of plugin `{name}` is a number, not {v}"))?,
                    ),
                };
                plugins.push(PluginOption {
                    name: name.to_owned(),
                    preemptable: flag(plugin, "enablePreemptable")?,
                    reclaimable: flag(plugin, "enableReclaimable")?,
                    overcommit_factor: factor,
                });
            }
            tiers.push(plugins);
        }
        Ok(SchedulerConf { actions, tiers })
    }

    /// Whether `action` is configured.
    pub(crate) fn runs(&self, action: &str) -> bool {
        self.actions.iter().any(|a| a == action)
    }

    /// The plugin named `name`, in the first tier that has it.
    pub(crate) fn plugin(&self, name: &str) -> Option<&PluginOption> {
        self.tiers.iter().flatten().find(|p| p.name == name)
    }

    /// The queue plugin: `capacity` when a tier names it, else `proportion`, else none.
    pub(crate) fn queue_plugin(&self) -> Option<&'static str> {
        if self.plugin("capacity").is_some() {
            Some("capacity")
        } else if self.plugin("proportion").is_some() {
            Some("proportion")
        } else {
            None
        }
    }

    /// The overcommit plugin's factor in percent, when the plugin is configured
    /// (`defaultOverCommitFactor` 1.2; a factor under 1 falls back to it).
    pub(crate) fn overcommit_percent(&self) -> Option<i128> {
        let plugin = self.plugin("overcommit")?;
        let factor = plugin.overcommit_factor.filter(|f| *f >= 1.0).unwrap_or(1.2);
        Some((factor * 100.0).round() as i128)
    }
}

/// Which eviction a vote is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eviction {
    Preempt,
    Reclaim,
}

/// The framework's vote over the tiers (`Session.Preemptable` and `Session.Reclaimable` in
/// pkg/scheduler/framework/session_plugins.go; read, not run): in each tier, every enabled
/// plugin that has a function returns its candidates and they are intersected; a plugin
/// returning none ends that tier without a decision; the first tier with victims decides.
/// `vote(plugin)` is `None` for a plugin without a function of this kind.
pub(crate) fn vote<T: PartialEq + Clone>(
    conf: &SchedulerConf,
    kind: Eviction,
    mut vote: impl FnMut(&str) -> Option<Vec<T>>,
) -> Vec<T> {
    for tier in &conf.tiers {
        let mut victims: Option<Vec<T>> = None;
        for plugin in tier {
            let enabled = match kind {
                Eviction::Preempt => plugin.preemptable,
                Eviction::Reclaim => plugin.reclaimable,
            };
            if !enabled {
                continue;
            }
            let Some(candidates) = vote(&plugin.name) else { continue };
            if candidates.is_empty() {
                victims = None;
                break;
            }
            victims = Some(match victims {
                None => candidates,
                Some(v) => v.into_iter().filter(|t| candidates.contains(t)).collect(),
            });
        }
        if let Some(v) = victims.filter(|v| !v.is_empty()) {
            return v;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_charts() {
        let conf = SchedulerConf::default();
        assert_eq!(conf.actions, ["enqueue", "allocate", "backfill"]);
        assert!(!conf.plugin("gang").unwrap().preemptable);
        assert!(conf.plugin("gang").unwrap().reclaimable);
        assert_eq!(conf.queue_plugin(), Some("proportion"));
        assert_eq!(conf.overcommit_percent(), Some(120));
    }

    #[test]
    fn bad_confs_name_the_key() {
        let err = SchedulerConf::parse("tiers: []").unwrap_err();
        assert!(err.contains("`actions"), "{err}");
        let err = SchedulerConf::parse("actions: \"allocate, gangpreempt\"").unwrap_err();
        assert!(err.contains("`gangpreempt`"), "{err}");
        let err =
            SchedulerConf::parse("actions: allocate\ntiers:\n- plugins:\n  - enablePreemptable: false\n").unwrap_err();
        assert!(err.contains("no `name`"), "{err}");
        let err =
            SchedulerConf::parse("actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enablePreemptable: 3\n")
                .unwrap_err();
        assert!(err.contains("enablePreemptable"), "{err}");
        let conf = SchedulerConf::parse(
            "actions: allocate\ntiers:\n- plugins:\n  - name: overcommit\n    arguments:\n      overcommit-factor: 3.0\n",
        )
        .unwrap();
        assert_eq!(conf.overcommit_percent(), Some(300));
    }

    #[test]
    fn an_empty_vote_ends_only_its_tier() {
        let conf = SchedulerConf::parse(
            "actions: reclaim\ntiers:\n- plugins:\n  - name: gang\n  - name: conformance\n- plugins:\n  - name: proportion\n",
        )
        .unwrap();
        let victims = vote(&conf, Eviction::Reclaim, |p| match p {
            "gang" => Some(Vec::<u32>::new()),
            "conformance" => Some(vec![1, 2]),
            "proportion" => Some(vec![2]),
            _ => None,
        });
        assert_eq!(victims, [2]);
        let victims = vote(&conf, Eviction::Reclaim, |p| match p {
            "gang" => Some(vec![1, 2, 3]),
            "conformance" => Some(vec![1, 2]),
            _ => None,
        });
        assert_eq!(victims, [1, 2]);
    }
}
