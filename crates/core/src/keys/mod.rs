//! Strict reading of config and experiment sections: serde's errors turned into [`KeyError`]s that name the full
//! dotted key and say what is wrong in the house style (`unknown key "x" (expected one of: a, b)`,
//! `missing required key "x"`), with suggestions for misspelt names; and the [`Provenance`] of
//! merged values, which turns a key into the file or flag that set it.

mod lenient;
mod yaml;

pub use yaml::{redact_quoted, yaml_message};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where one value of the merged config came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Dotted key path, e.g. `hosts.gpu-box.chips.h100`.
    pub key: String,
    /// Source, e.g. `built-in defaults`, `~/.theseus.yaml`, `env THESEUSCFG_PRIORITY`, `--set`.
    pub source: String,
}

/// A problem at one dotted key path, before the source is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// Dotted key path, e.g. `hosts.box.chips.h10`.
    pub path: String,
    /// What is wrong, e.g. `unknown chip "h10" (did you mean "h100"?)`.
    pub message: String,
}

impl KeyError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        KeyError { path: path.into(), message: message.into() }
    }
}

/// ` (did you mean "x"?)` when a known name is close, else ` (known <what>: a, b)`.
pub fn suggestion(name: &str, known: &[&str], what: &str) -> String {
    let best = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, k)) => format!(" (did you mean {k:?}?)"),
        None if known.is_empty() => format!(" (no {what} are defined)"),
        None => format!(" (known {what}: {})", known.join(", ")),
    }
}

/// Deserializes `value` and turns serde's errors into [`KeyError`]s with the full key path and
/// house-style messages (`unknown key "x" (expected one of: a, b)`, `missing required key "x"`).
pub fn de_strict<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, KeyError> {
    serde_path_to_error::deserialize(lenient::Lenient(value)).map_err(|e| {
        let sub = e.path().to_string();
        let path = match (sub.as_str(), prefix) {
            (".", _) | ("", _) => prefix.to_owned(),
            (_, "") => sub,
            _ => format!("{prefix}.{sub}"),
        };
        let raw = e.inner().to_string();
        let ticked: Vec<&str> = raw.split('`').skip(1).step_by(2).collect();
        if raw.starts_with("unknown field") && !ticked.is_empty() {
            let (key, expected) = (ticked[0], &ticked[1..]);
            let mut message = format!("unknown key {key:?}");
            if !expected.is_empty() {
                message.push_str(&format!(" (expected one of: {})", expected.join(", ")));
            }
            KeyError::new(path, message)
        } else if raw.starts_with("unknown variant") && !ticked.is_empty() {
            KeyError::new(path, format!("unknown value {:?} (expected one of: {})", ticked[0], ticked[1..].join(", ")))
        } else if raw.starts_with("missing field") && !ticked.is_empty() {
            KeyError::new(path, format!("missing required key {:?}", ticked[0]))
        } else if let Some(found) =
            raw.strip_prefix("invalid type: ").and_then(|r| r.strip_suffix(", expected a string"))
        {
            // Numbers and booleans are read as text (see `lenient`): what is left is a list or a map.
            let found = match found {
                "sequence" => "a list",
                "map" => "a map",
                other => other,
            };
            KeyError::new(
                path,
                format!(
                    "expected a string, found {found}: write one value (in quotes if it holds `: `, `#`, `[` or `{{`)"
                ),
            )
        } else {
            KeyError::new(path, raw)
        }
    })
}

/// An "unknown key" error.
pub fn unknown_key(path: &str, key: &str, expected: &[&str]) -> KeyError {
    KeyError::new(path, format!("unknown key {key:?} (expected one of: {})", expected.join(", ")))
}

/// A short description of a JSON value's type, for messages.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}
