//! The import-circle check: in every crate of the workspace, the modules under one parent must
//! use each other one way.
//!
//! Each crate root (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, a fuzz target) is read with its
//! module tree (`mod NAME;`, test-only modules left out). Each path a module names is resolved to
//! the module that defines it, following `pub use` re-exports. An edge from module X to module Y
//! is then lifted to the two children of their nearest common ancestor that hold X and Y: a
//! parent and its own descendants may use each other, but the children of one parent must form
//! no circle. A circle is reported with the file-to-file edges that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::source::{self, Named};

/// One module of a crate tree: `crate::a::b` as `["a", "b"]`.
type ModPath = Vec<String>;

/// A crate tree as read from its files.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    /// The file of each module.
    files: BTreeMap<ModPath, PathBuf>,
    /// What each module names, with the raw segments (relative paths still relative).
    named: BTreeMap<ModPath, Vec<Named>>,
}

impl Tree {
    /// Reads the tree rooted at `root_file` (a crate root).
    pub(crate) fn read(root_file: &Path) -> Result<Tree, String> {
        let mut tree = Tree::default();
        let mut stack = vec![(Vec::new(), root_file.to_owned())];
        while let Some((module, file)) = stack.pop() {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let dir = child_dir(&file, module.is_empty());
            for decl in source::mod_decls(&text) {
                let child_file = match &decl.path {
                    Some(p) => file.parent().unwrap_or(Path::new(".")).join(p),
                    None => {
                        let flat = dir.join(format!("{}.rs", decl.name));
                        if flat.exists() { flat } else { dir.join(&decl.name).join("mod.rs") }
                    }
                };
                if child_file.exists() {
                    let mut child = module.clone();
                    child.push(decl.name);
                    stack.push((child, child_file));
                }
            }
            tree.named.insert(module.clone(), source::named_paths(&source::code(&text)));
            tree.files.insert(module, file);
        }
        Ok(tree)
    }

    /// Builds a tree from texts, for tests: module path (`a::b`, `` for the root) to source.
    #[cfg(test)]
    fn from_texts(texts: &[(&str, &str)]) -> Tree {
        let mut tree = Tree::default();
        for (module, text) in texts {
            let path: ModPath = module.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
            tree.named.insert(path.clone(), source::named_paths(&source::code(text)));
            tree.files.insert(path, PathBuf::from(format!("{}.rs", if module.is_empty() { "lib" } else { module })));
        }
        tree
    }

    /// The edges between modules: (from, to) with the names that tie them.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), BTreeSet<String>> {
        let mut edges: BTreeMap<(ModPath, ModPath), BTreeSet<String>> = BTreeMap::new();
        for (module, named) in &self.named {
            for n in named {
                let Some(absolute) = self.absolute(module, &n.segments) else { continue };
                let (target, name) = self.resolve(&absolute, 0);
                if target != *module {
                    edges.entry((module.clone(), target)).or_default().insert(name);
                }
            }
        }
        edges
    }

    /// `segments` as named in `module`, made absolute (without `crate`); `None` for paths into
    /// other crates.
    fn absolute(&self, module: &ModPath, segments: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String>;
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base = Vec::new();
                rest = &rest[1..];
            }
            Some("self") => {
                base = module.clone();
                rest = &rest[1..];
            }
            Some("super") => {
                base = module.clone();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A child module, or a name this module brought into scope with `use`.
                let mut child = module.clone();
                child.push(first.to_owned());
                if self.files.contains_key(&child) {
                    base = child;
                    rest = &rest[1..];
                } else {
                    let bound = self.named.get(module)?.iter().find(|n| n.binds.as_deref() == Some(first))?;
                    if bound.segments.first().is_some_and(|s| s == first) {
                        return None;
                    }
                    base = self.absolute(module, &bound.segments)?;
                    rest = &rest[1..];
                }
            }
            None => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that defines absolute path `path`, and the name it defines there: the longest
    /// module prefix, then through that module's `pub use` re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> (ModPath, String) {
        let mut len = path.len();
        while len > 0 && !self.files.contains_key(&path[..len]) {
            len -= 1;
        }
        let module = path[..len].to_vec();
        let Some(name) = path.get(len) else {
            return (module, path.last().cloned().unwrap_or_else(|| "crate".into()));
        };
        if depth < 8
            && let Some(named) = self.named.get(&module)
        {
            for n in named {
                if n.reexport.as_deref() == Some(name.as_str())
                    && let Some(target) = self.absolute(&module, &n.segments)
                {
                    let mut full = target;
                    full.extend(path[len + 1..].iter().cloned());
                    return self.resolve(&full, depth + 1);
                }
            }
        }
        (module, name.clone())
    }

    /// Every circle among the children of one parent, each with the file edges that close it.
    pub(crate) fn circles(&self) -> Vec<Circle> {
        // Lifted edges per parent: child -> child, with the file edges under them.
        type Lifted = BTreeMap<(String, String), Vec<(ModPath, ModPath, BTreeSet<String>)>>;
        let mut by_parent: BTreeMap<ModPath, Lifted> = BTreeMap::new();
        for ((from, to), names) in self.edges() {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // an ancestor and its descendant
            }
            let parent = from[..common].to_vec();
            by_parent
                .entry(parent)
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_default()
                .push((from, to, names));
        }
        let mut circles = Vec::new();
        for (parent, lifted) in by_parent {
            let graph: BTreeMap<&str, Vec<&str>> = lifted.keys().fold(BTreeMap::new(), |mut g, (a, b)| {
                g.entry(a.as_str()).or_insert_with(Vec::new).push(b.as_str());
                g
            });
            for component in strongly_connected(&graph) {
                let members: BTreeSet<&str> = component.iter().copied().collect();
                let mut ties = Vec::new();
                for ((a, b), files) in &lifted {
                    if members.contains(a.as_str()) && members.contains(b.as_str()) {
                        for (from, to, names) in files {
                            ties.push(format!(
                                "{} -> {}: {}",
                                self.file_name(from),
                                self.file_name(to),
                                names.iter().cloned().collect::<Vec<_>>().join(", ")
                            ));
                        }
                    }
                }
                circles.push(Circle {
                    parent: self.file_name(&parent),
                    members: component.iter().map(|m| (*m).to_owned()).collect(),
                    ties,
                });
            }
        }
        circles
    }

    /// Every edge between two children of `parent` (`a::b` as `["a", "b"]`), as `file -> file:
    /// names`: for parents whose children must not use each other at all.
    pub(crate) fn sibling_uses(&self, parent: &[&str]) -> Vec<String> {
        let depth = parent.len();
        let under = |m: &ModPath| m.len() > depth && m.iter().zip(parent).all(|(a, b)| a == b);
        self.edges()
            .into_iter()
            .filter(|((from, to), _)| under(from) && under(to) && from[depth] != to[depth])
            .map(|((from, to), names)| {
                let names: Vec<String> = names.into_iter().collect();
                format!("{} -> {}: {}", self.file_name(&from), self.file_name(&to), names.join(", "))
            })
            .collect()
    }

    fn file_name(&self, module: &ModPath) -> String {
        self.files.get(module).map_or_else(|| module.join("::"), |f| f.display().to_string())
    }
}

/// Children of one parent that use each other in a circle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Circle {
    /// The parent's file.
    pub(crate) parent: String,
    /// The children in the circle.
    pub(crate) members: Vec<String>,
    /// `file -> file: names` for every edge between members.
    pub(crate) ties: Vec<String>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.members.is_empty() {
            writeln!(f, "under {}: these children use a sibling", self.parent)?;
        } else {
            writeln!(f, "under {}: {} use each other in a circle", self.parent, self.members.join(" <-> "))?;
        }
        for tie in &self.ties {
            writeln!(f, "    {tie}")?;
        }
        Ok(())
    }
}

/// The components of more than one node (Tarjan's algorithm; the graphs are small).
fn strongly_connected<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(v, graph, &mut state);
        }
    }
    state.out
}

/// The crate roots of the workspace under `root`: every package's `src/lib.rs`, `src/main.rs`,
/// `src/bin/*.rs`, and the fuzz targets.
pub(crate) fn crate_roots(root: &Path) -> Vec<PathBuf> {
    let mut packages = vec![root.join("xtask")];
    if let Ok(entries) = std::fs::read_dir(root.join("crates")) {
        packages.extend(entries.flatten().map(|e| e.path()).filter(|p| p.join("Cargo.toml").exists()));
    }
    let mut roots = Vec::new();
    for package in packages {
        for file in ["src/lib.rs", "src/main.rs"] {
            let path = package.join(file);
            if path.exists() {
                roots.push(path);
            }
        }
        for dir in ["src/bin"] {
            if let Ok(entries) = std::fs::read_dir(package.join(dir)) {
                roots.extend(entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "rs")));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(root.join("fuzz/fuzz_targets")) {
        roots.extend(entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "rs")));
    }
    roots.sort();
    roots
}

/// Parents whose children use none of their siblings: (crate root, parent module, why).
const NO_SIBLING_USE: &[(&str, &[&str], &str)] = &[(
    "crates/cli/src/main.rs",
    &["commands"],
    "a command module parses, calls core, prints and picks the exit code; what two commands share \
     belongs in core or in a module of the CLI outside `commands`",
)];

/// Every circle in every crate of the workspace at `root`, and every use between children of a
/// [`NO_SIBLING_USE`] parent (as a circle of its own), file names relative to it.
pub(crate) fn check(root: &Path) -> Result<Vec<Circle>, String> {
    let prefix = format!("{}/", root.display());
    let relative = |text: &str| text.replace(&prefix, "");
    let mut found = Vec::new();
    for crate_root in crate_roots(root) {
        let tree = Tree::read(&crate_root)?;
        for (file, parent, why) in NO_SIBLING_USE {
            let uses = if crate_root == root.join(file) { tree.sibling_uses(parent) } else { Vec::new() };
            if !uses.is_empty() {
                found.push(Circle {
                    parent: format!("{file} `{}` ({why})", parent.join("::")),
                    members: Vec::new(),
                    ties: uses.iter().map(|u| relative(u)).collect(),
                });
            }
        }
        for circle in tree.circles() {
            found.push(Circle {
                parent: relative(&circle.parent),
                ties: circle.ties.iter().map(|t| relative(t)).collect(),
                ..circle
            });
        }
    }
    Ok(found)
}

/// The dir where the files of `file`'s child modules live: beside a crate root or `mod.rs`, else
/// in a dir named after the file.
fn child_dir(file: &Path, is_root: bool) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(".")).to_owned();
    if is_root || file.file_name().is_some_and(|n| n == "mod.rs") {
        parent
    } else {
        parent.join(file.file_stem().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(tree: &Tree) -> Vec<Vec<String>> {
        tree.circles().into_iter().map(|c| c.members).collect()
    }

    #[test]
    fn siblings_that_use_each_other_are_a_circle() {
        let tree = Tree::from_texts(&[
            ("", "mod a;\nmod b;\nmod c;\n"),
            ("a", "use crate::b::B;\n"),
            ("b", "use super::a::A;\n"),
            ("c", "use crate::a::A;\n"),
        ]);
        let circles = tree.circles();
        assert_eq!(members(&tree), [["a", "b"]]);
        assert_eq!(circles[0].ties, ["a.rs -> b.rs: B", "b.rs -> a.rs: A"]);
    }

    #[test]
    fn a_parent_and_its_children_may_use_each_other() {
        let tree = Tree::from_texts(&[
            ("", "pub mod config;\npub use config::Config;\n"),
            ("config", "mod validate;\npub struct Config;\n"),
            ("config::validate", "use super::Config;\nuse crate::Config as C;\n"),
        ]);
        assert!(tree.circles().is_empty(), "{:?}", tree.circles());
    }

    #[test]
    fn a_circle_through_a_folder_is_lifted_to_the_folder() {
        // store/ship.rs uses backend.rs, and backend.rs uses store: store <-> backend.
        let tree = Tree::from_texts(&[
            ("", "mod backend;\nmod store;\n"),
            ("backend", "use crate::store::ShipReport;\n"),
            ("store", "mod ship;\npub use ship::ShipReport;\n"),
            ("store::ship", "use crate::backend::ProgressFn;\npub struct ShipReport;\n"),
        ]);
        let circles = tree.circles();
        assert_eq!(members(&tree), [["backend", "store"]]);
        // The re-export is followed to the file that defines the name.
        assert!(circles[0].ties.contains(&"backend.rs -> store::ship.rs: ShipReport".to_owned()), "{circles:?}");
    }

    #[test]
    fn names_reached_through_a_module_in_scope_count() {
        let tree = Tree::from_texts(&[
            ("", "mod a;\nmod b;\n"),
            ("a", "use crate::b;\nfn f() { b::g(); }\n"),
            ("b", "fn g() { crate::a::h() }\n"),
        ]);
        assert_eq!(members(&tree), [["a", "b"]]);
    }

    #[test]
    fn children_that_must_stand_alone_may_not_use_each_other_even_one_way() {
        let tree = Tree::from_texts(&[
            ("", "mod commands;\nmod shared;\n"),
            ("commands", "mod a;\nmod b;\n"),
            ("commands::a", "use super::b::helper;\nuse crate::shared::S;\n"),
            ("commands::b", "pub fn helper() {}\n"),
            ("shared", "pub struct S;\n"),
        ]);
        assert!(tree.circles().is_empty());
        assert_eq!(tree.sibling_uses(&["commands"]), ["commands::a.rs -> commands::b.rs: helper"]);
        assert!(tree.sibling_uses(&[]).iter().all(|u| !u.contains("commands::a.rs -> commands::b.rs")));
    }

    #[test]
    fn one_way_use_is_no_circle() {
        let tree = Tree::from_texts(&[
            ("", "mod a;\nmod b;\nmod c;\n"),
            ("a", "use crate::b::B;\nuse crate::c::C;\n"),
            ("b", "use crate::c::C;\n"),
            ("c", "pub struct C;\n"),
        ]);
        assert!(tree.circles().is_empty());
    }
}
