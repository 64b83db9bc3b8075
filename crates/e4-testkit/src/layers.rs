//! A crate's folders as layers: reads every source file's module paths (`crate::…`,
//! `super::…` and a declared child's `name::…`, outside comments and `#[cfg(test)]`
//! modules), and names each import from a lower layer to a higher one, each import between
//! two folders of one layer, and each circle of files importing each other. Each crate's
//! `tests/layers.rs` runs it with its own table of layers, so the rule is checked by
//! `cargo test` and written down once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What breaks the layering of the crate whose sources are in `src`: `layers` gives each
/// top-level module (folder, or file at the root; `lib` for the crate root) its layer,
/// lowest first. Empty when the layers hold.
pub fn layering_problems(src: &Path, layers: &[(&str, u32)]) -> Vec<String> {
    let modules = modules(src);
    let edges = imports(&modules);
    let layer_of = |module: &str| -> Result<(String, u32), String> {
        let top = module.split("::").next().unwrap_or(module);
        layers
            .iter()
            .find(|(name, _)| *name == top)
            .map(|(name, layer)| (name.to_string(), *layer))
            .ok_or_else(|| format!("{module}: a top-level module without a layer"))
    };
    let mut problems = Vec::new();
    for (from, targets) in &edges {
        let (from_top, from_layer) = match layer_of(from) {
            Ok(l) => l,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        for to in targets {
            let Ok((to_top, to_layer)) = layer_of(to) else {
                continue;
            };
            if to_layer > from_layer || (to_layer == from_layer && to_top != from_top) {
                problems.push(format!(
                    "{from} (layer {from_layer}) imports {to} (layer {to_layer})"
                ));
            }
        }
    }
    problems.extend(
        circles(&edges)
            .into_iter()
            .map(|c| format!("import circle: {c}")),
    );
    problems
}

/// Module path (`pass1::really_dir`; `lib` for the crate root) to its source text.
fn modules(root: &Path) -> BTreeMap<String, String> {
    fn visit(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("reading src/") {
            let path = entry.expect("reading src/").path();
            if path.is_dir() {
                visit(&path, root, out);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .expect("under src/")
                .with_extension("");
            let parts: Vec<&str> = rel
                .iter()
                .map(|p| p.to_str().expect("UTF-8 names"))
                .collect();
            let name = match parts.as_slice() {
                [.., "mod"] => parts[..parts.len() - 1].join("::"),
                _ => parts.join("::"),
            };
            let text = std::fs::read_to_string(&path).expect("reading a source file");
            out.insert(name, text);
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, &mut out);
    out
}

/// The code of `text` without comments and without what follows `#[cfg(test)]` (test
/// modules close every file here).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `text` names after `prefix` (`crate::a::b` gives `["a", "b"]`).
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        paths.push(
            path.split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        );
    }
    paths
}

/// Each module's imports of other modules of the crate.
fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let longest_module = |parts: &[String]| {
        (1..=parts.len())
            .rev()
            .map(|k| parts[..k].join("::"))
            .find(|m| modules.contains_key(m))
    };
    let mut edges = BTreeMap::new();
    for (name, text) in modules {
        let code = code_of(text);
        assert!(
            !code.contains("crate::{"),
            "{name}: one `use` per module, so that this test can read it"
        );
        let here: Vec<String> = if name == "lib" {
            Vec::new()
        } else {
            name.split("::").map(String::from).collect()
        };
        let mut targets = BTreeSet::new();
        for path in paths_after(&code, "crate::") {
            targets.extend(longest_module(&path));
        }
        let parent = &here[..here.len().saturating_sub(1)];
        for path in paths_after(&code, "super::") {
            let full: Vec<String> = parent.iter().cloned().chain(path).collect();
            targets.extend(longest_module(&full).or_else(|| Some(parent.join("::"))));
        }
        for child in paths_after(&code, "mod ")
            .into_iter()
            .filter_map(|p| p.first().cloned())
        {
            let child_path: Vec<String> = here.iter().cloned().chain([child.clone()]).collect();
            if paths_after(&code, &format!("{child}::")).is_empty() {
                continue;
            }
            targets.extend(longest_module(&child_path));
        }
        targets.retain(|t| t != name && !t.is_empty());
        edges.insert(name.clone(), targets);
    }
    edges
}

/// The circles of modules that import each other, each as "a -> b -> …".
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let names: Vec<&String> = edges.keys().collect();
    let index_of = |m: &String| names.iter().position(|n| *n == m);
    let succ: Vec<Vec<usize>> = names
        .iter()
        .map(|n| edges[*n].iter().filter_map(index_of).collect())
        .collect();
    let mut circles = Vec::new();
    // Two modules share a circle when each reaches the other (a few dozen files: a walk
    // from each is cheap).
    let reach: Vec<BTreeSet<usize>> = (0..names.len())
        .map(|start| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![start];
            while let Some(v) = todo.pop() {
                for &w in &succ[v] {
                    if seen.insert(w) {
                        todo.push(w);
                    }
                }
            }
            seen
        })
        .collect();
    let mut placed = BTreeSet::new();
    for v in 0..names.len() {
        if placed.contains(&v) || !reach[v].contains(&v) {
            continue;
        }
        let circle: Vec<&str> = (0..names.len())
            .filter(|&w| reach[v].contains(&w) && reach[w].contains(&v))
            .inspect(|&w| {
                placed.insert(w);
            })
            .map(|w| names[w].as_str())
            .collect();
        circles.push(circle.join(" -> "));
    }
    circles
}
