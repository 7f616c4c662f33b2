//! YAML parse errors as messages that say where the file is wrong and never quote it (config,
//! experiment and kubeconfig files may hold secrets).

/// The first line of a serde-saphyr error (it already has line and column), without its
/// `error: ` prefix, hints meant for programmers, the source snippet that follows it, and any
/// quoted text of the file (see [`redact_quoted`]): config, experiment and kubeconfig files may
/// hold secrets, so a parse error shows where, never what.
pub fn yaml_message(raw: &str) -> String {
    let first = raw.lines().next().unwrap_or(raw).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let first = first.split(", set DuplicateKeyPolicy").next().unwrap_or(first);
    redact_quoted(first)
}

/// Replaces quoted fragments (`"…"`, `'…'`, `` `…` ``) longer than two characters with `"…"`:
/// they are text of the file (a value, a key), while the parser's own quotes name single
/// characters (`expected ',' or '}'`), which stay.
pub fn redact_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(['"', '\'', '`']) {
        let quote = rest[start..].chars().next().unwrap_or('"');
        let after = &rest[start + 1..];
        match after.find(quote) {
            Some(len) => {
                out.push_str(&rest[..start]);
                if after[..len].chars().count() > 2 {
                    out.push_str("\"…\"");
                } else {
                    out.push_str(&rest[start..start + len + 2]);
                }
                rest = &after[len + 1..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}
