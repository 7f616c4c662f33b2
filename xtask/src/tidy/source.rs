//! Reading one Rust source file as text, without a parser: the code with comments, strings and
//! test-only items blanked out, its `mod` declarations, and every module path it names
//! (`use` trees and qualified paths such as `crate::a::B` or `super::x::f`).
//!
//! This is what the import-circle check of [`super::imports`] needs and no more; it is exact for
//! the way this workspace writes Rust (rustfmt-formatted, no macros that name modules).

/// The code of `text` with comments and string and char literals replaced by spaces (line
/// breaks kept), and every item under a `#[cfg(test)]`-like attribute removed.
pub(crate) fn code(text: &str) -> String {
    drop_test_items(&blank_literals(text))
}

/// Comments, strings and chars blanked out. Lifetimes (`'a`) are kept.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"..." / r#"..."# / br#"..."#: ends at a quote followed by as many hashes.
            let open = i + chars[i..].iter().position(|&c| c == '"').unwrap_or(0);
            for &c in &chars[i..=open] {
                blank(&mut out, c);
            }
            i = open + 1;
            while i < chars.len() {
                if chars[i] == '"' && (0..hashes).all(|h| chars.get(i + 1 + h) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' || (c == '\'' && is_char_literal(&chars, i)) {
            i = blank_quoted(&chars, i, &mut out);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks the string or char literal whose opening quote is at `i` (escapes included), keeping
/// line breaks; returns the index after its closing quote.
fn blank_quoted(chars: &[char], mut i: usize, out: &mut String) -> usize {
    let quote = chars[i];
    out.push(' ');
    i += 1;
    while i < chars.len() && chars[i] != quote {
        let escaped = chars[i] == '\\';
        for _ in 0..if escaped { 2 } else { 1 } {
            if let Some(&c) = chars.get(i) {
                out.push(if c == '\n' { '\n' } else { ' ' });
                i += 1;
            }
        }
    }
    out.push(' ');
    i + 1
}

/// At `i`, the start of a raw (byte) string: the number of its hashes.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    let prev_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    if prev_is_ident {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// Whether the `'` at `i` opens a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) and not a lifetime.
fn is_char_literal(chars: &[char], i: usize) -> bool {
    match chars.get(i + 1) {
        Some('\\') => true,
        Some(_) => chars.get(i + 2) == Some(&'\''),
        None => false,
    }
}

/// Removes each item that follows a `#[cfg(...)]` attribute naming `test` (and the attribute):
/// up to its `;` when that comes before any `{`, else up to the matching `}`.
fn drop_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(") {
        out.push_str(&rest[..at]);
        let attr_end = rest[at..].find(']').map_or(rest.len(), |e| at + e + 1);
        let attr = &rest[at..attr_end];
        if !words(attr).any(|w| w == "test") || attr.contains("not(test") {
            out.push_str(attr);
            rest = &rest[attr_end..];
            continue;
        }
        let item = &rest[attr_end..];
        let end = item_end(item);
        out.extend(rest[at..attr_end + end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        rest = &rest[attr_end + end..];
    }
    out.push_str(rest);
    out
}

/// The length of the item at the start of `item`: through its `;`, or through the `}` that
/// closes its first `{`.
fn item_end(item: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in item.char_indices() {
        match c {
            ';' if depth == 0 => return i + 1,
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    item.len()
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty())
}

/// A `mod NAME;` declaration (modules with a body stay part of their file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModDecl {
    pub(crate) name: String,
    /// The file a `#[path = "..."]` attribute names, as written.
    pub(crate) path: Option<String>,
}

/// The `mod NAME;` declarations of `raw` (the file's text) that are not test-only.
pub(crate) fn mod_decls(raw: &str) -> Vec<ModDecl> {
    let code = code(raw);
    let raw_lines: Vec<&str> = raw.lines().collect();
    let mut decls = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        let Some(pos) = toks.iter().position(|t| *t == "mod") else { continue };
        let vis_ok = toks[..pos].iter().all(|t| t.starts_with("pub"));
        let Some(name) = toks.get(pos + 1).and_then(|t| t.strip_suffix(';')) else { continue };
        if !vis_ok || name.is_empty() {
            continue;
        }
        // A `#[path = "..."]` on the line before (its string was blanked in `code`).
        let path = n
            .checked_sub(1)
            .and_then(|p| raw_lines.get(p))
            .and_then(|l| l.trim().strip_prefix("#[path = \""))
            .and_then(|l| l.strip_suffix("\"]"))
            .map(str::to_owned);
        decls.push(ModDecl { name: name.to_owned(), path });
    }
    decls
}

/// One path a file names: its segments (a `use` alias or glob not included), and for `use`
/// items whether the item re-exports it (`pub use`) and under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) segments: Vec<String>,
    /// For a `pub use` (any visibility but private): the name it is re-exported as.
    pub(crate) reexport: Option<String>,
    /// For a `use` item: the name it brings into scope (`*` for a glob).
    pub(crate) binds: Option<String>,
}

/// Every path `code` (from [`code`]) names: each leaf of each `use` tree, then each qualified
/// path outside `use` items that starts with `crate`, `super`, `self` or one of `scope` names (a
/// module the file brought into scope).
pub(crate) fn named_paths(code: &str) -> Vec<Named> {
    let mut out = Vec::new();
    let mut rest_code = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_use(rest) {
        rest_code.push_str(&rest[..at.start]);
        let end = rest[at.tree..].find(';').map_or(rest.len(), |e| at.tree + e);
        let tree: String = rest[at.tree..end].chars().filter(|c| !c.is_whitespace()).collect();
        let mut leaves = Vec::new();
        expand(&tree, &mut Vec::new(), &mut leaves);
        for (segments, binds) in leaves {
            let reexport = (at.public && binds != "*").then(|| binds.clone());
            out.push(Named { segments, reexport, binds: Some(binds) });
        }
        rest = &rest[(end + 1).min(rest.len())..];
    }
    rest_code.push_str(rest);
    let bare: Vec<String> = out.iter().filter_map(|n| n.binds.clone()).filter(|b| b != "*").collect();
    let chars: Vec<char> = rest_code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if !(starts_word && (chars[i].is_alphabetic() || chars[i] == '_')) {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            segments.push(chars[start..j].iter().collect::<String>());
            if chars.get(j) == Some(&':')
                && chars.get(j + 1) == Some(&':')
                && chars.get(j + 2).is_some_and(|c| c.is_alphabetic() || *c == '_')
            {
                j += 2;
            } else {
                break;
            }
        }
        let first = segments[0].as_str();
        if segments.len() > 1 && (matches!(first, "crate" | "super" | "self") || bare.iter().any(|b| b == first)) {
            out.push(Named { segments, reexport: None, binds: None });
        }
        i = j.max(i + 1);
    }
    out
}

/// Where a `use` item starts: the item (with its visibility) and its tree.
struct UseAt {
    start: usize,
    tree: usize,
    public: bool,
}

/// The next `use` item in `code`.
fn find_use(code: &str) -> Option<UseAt> {
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(off) = code[from..].find("use ") {
        let at = from + off;
        from = at + 4;
        let before = code[..at].trim_end_matches([' ', '\t']);
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        let prefix = before[line_start..].trim();
        let at_item = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        if !at_item {
            continue;
        }
        let public = prefix.starts_with("pub");
        if !(prefix.is_empty() || public) {
            continue;
        }
        return Some(UseAt { start: line_start, tree: at + 4, public });
    }
    None
}

/// Expands a `use` tree (whitespace removed) into its leaves: full segments and bound name.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim_start_matches("::");
    if let Some(open) = tree.find('{')
        && tree.ends_with('}')
        && !tree[..open].contains(',')
    {
        let head: Vec<String> = tree[..open].split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
        let len = prefix.len();
        prefix.extend(head);
        for part in split_top(&tree[open + 1..tree.len() - 1]) {
            expand(part, prefix, out);
        }
        prefix.truncate(len);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once("as") {
        Some((p, a)) if !p.is_empty() && !p.ends_with(':') && a.chars().all(|c| c.is_alphanumeric() || c == '_') => {
            (p, Some(a.to_owned()))
        }
        _ => (tree, None),
    };
    let mut segments = prefix.clone();
    segments.extend(path.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
    let last = segments.last().cloned().unwrap_or_default();
    if last == "self" {
        segments.pop();
    }
    let binds =
        alias.unwrap_or_else(|| if last == "self" { segments.last().cloned().unwrap_or_default() } else { last });
    if binds == "*" {
        segments.pop();
    }
    out.push((segments, binds));
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(named: &[Named]) -> Vec<String> {
        named.iter().map(|n| n.segments.join("::")).collect()
    }

    #[test]
    fn comments_strings_and_test_items_name_nothing() {
        let text = "// use crate::a;\n/* crate::b::X */ let s = \"crate::c::Y\"; let r = r#\"crate::d\"#;\n\
                    let c = '\"'; fn f<'a>(x: &'a str) { crate::e::g() }\n\
                    #[cfg(test)]\nmod tests { use crate::h::I; }\n#[cfg(test)]\nuse crate::j::K;\n";
        assert_eq!(segs(&named_paths(&code(text))), ["crate::e::g"]);
    }

    #[test]
    fn use_trees_expand_to_their_leaves() {
        let text = "use crate::{a::B, c::{self, D as E}, f::*};\npub(crate) use super::g::H;\nuse std::fmt;\n";
        let named = named_paths(&code(text));
        assert_eq!(segs(&named), ["crate::a::B", "crate::c", "crate::c::D", "crate::f", "super::g::H", "std::fmt"]);
        assert_eq!(named[2].binds.as_deref(), Some("E"));
        assert_eq!(named[3].binds.as_deref(), Some("*"));
        assert_eq!(named[4].reexport.as_deref(), Some("H"));
        assert_eq!(named[0].reexport, None);
    }

    #[test]
    fn qualified_paths_count_when_they_start_at_a_module_in_scope() {
        let text = "use crate::config;\nfn f() { config::validate::check(); other::thing(); super::x::Y::new(); }\n";
        let named = named_paths(&code(text));
        assert_eq!(segs(&named), ["crate::config", "config::validate::check", "super::x::Y::new"]);
    }

    #[test]
    fn mod_declarations_skip_test_ones_and_keep_path_attributes() {
        let text = "mod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests;\n#[path = \"x_impl.rs\"]\nmod x;\nmod inline { }\n";
        let decls = mod_decls(text);
        let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "x"]);
        assert_eq!(decls[3].path.as_deref(), Some("x_impl.rs"));
    }
}
