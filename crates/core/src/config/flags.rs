//! Command-line flags a host type adds to `submit`, `plan` and `repl` ([`HostType::flags`]):
//! each sets one key of every host of that type, as `--set hosts.NAME.KEY=VALUE` would, to
//! the flag's value (`--tpu-version V`) or to a constant (`--tpu-spot` sets `spot: true`).
//! The CLI adds them to its commands and hands back the ones given ([`GivenFlag`]);
//! [`super::HostTypes::apply_flags`] sets them, each value checked like the key it replaces.

use serde_json::Value;

use crate::plan::HostKind;

/// A flag of a host type ([`super::HostType::flags`]): `--NAME`, its help line and what it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostFlag {
    /// The flag without its dashes (`tpu-version`); unique among every command's flags, so
    /// start it with the type's name.
    pub name: &'static str,
    /// One line for `--help`.
    pub help: &'static str,
    /// What it sets.
    pub sets: FlagSets,
}

/// What a [`HostFlag`] sets on each host of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagSets {
    /// `--NAME VALUE` sets `key` to VALUE, read as YAML as `--set` reads it (`v2-alpha` is a
    /// string, `8` a number, `true` a boolean).
    Value {
        /// The host key.
        key: &'static str,
        /// The value's name in `--help` (`VERSION`).
        value_name: &'static str,
    },
    /// `--NAME` (no value) sets `key` to `value`. Flags of one type that set the same key
    /// exclude each other (`--tpu-spot` and `--tpu-on-demand`).
    Constant {
        /// The host key.
        key: &'static str,
        /// Its value.
        value: FlagConstant,
    },
}

/// The value a [`FlagSets::Constant`] flag sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagConstant {
    /// `true` or `false`.
    Bool(bool),
    /// A string.
    Text(&'static str),
}

impl HostFlag {
    /// The host key the flag sets.
    pub fn key(&self) -> &'static str {
        match self.sets {
            FlagSets::Value { key, .. } | FlagSets::Constant { key, .. } => key,
        }
    }
}

/// A host-type flag the user gave: the type, the flag and its value (`None` for a
/// [`FlagSets::Constant`] flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenFlag {
    /// The type whose flag it is.
    pub kind: HostKind,
    /// The flag.
    pub flag: HostFlag,
    /// The text after it, for a [`FlagSets::Value`] flag.
    pub raw: Option<String>,
}

impl GivenFlag {
    /// The flag as written (`--tpu-version v2-alpha`, `--tpu-spot`), for messages.
    pub fn shown(&self) -> String {
        match &self.raw {
            Some(raw) => format!("--{} {}", self.flag.name, crate::shell::quote(raw)),
            None => format!("--{}", self.flag.name),
        }
    }

    /// The value it sets: the YAML of its text (as `--set` reads it), or its constant.
    pub fn value(&self) -> Result<Value, String> {
        match (self.flag.sets, &self.raw) {
            (FlagSets::Constant { value: FlagConstant::Bool(b), .. }, _) => Ok(Value::Bool(b)),
            (FlagSets::Constant { value: FlagConstant::Text(t), .. }, _) => Ok(Value::String(t.to_owned())),
            (FlagSets::Value { .. }, Some(raw)) if raw.trim().is_empty() => Ok(Value::String(raw.clone())),
            (FlagSets::Value { .. }, Some(raw)) => serde_saphyr::from_str(raw)
                .map_err(|e| format!("invalid YAML value: {}", crate::keys::yaml_message(&e.to_string()))),
            (FlagSets::Value { .. }, None) => Err("the flag needs a value".into()),
        }
    }
}
