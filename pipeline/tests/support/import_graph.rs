//! What both crates' layout tests (`pipeline/tests/layout.rs`, `gateway/tests/layout.rs`)
//! need of a source tree as a graph: its Rust files, and a cycle among the edges found in
//! them, with the import that makes each edge as evidence. Included by path in each.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, depth first.
pub fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// A cycle of `edges` (node -> node it imports -> the import that says so), as the nodes
/// along it, the first again at the end; None where the graph is a DAG. Depth first: a
/// node met again while still on the path closes a cycle.
pub fn find_cycle<'a, E>(edges: &BTreeMap<&'a str, BTreeMap<&'a str, E>>) -> Option<Vec<&'a str>> {
    fn visit<'a, E>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeMap<&'a str, E>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in edges.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// `cycle` as a message: its nodes, then the import behind each of its edges as `describe`
/// writes it (given the import and the node it names).
pub fn cycle_report<'a, E>(
    cycle: &[&'a str],
    edges: &BTreeMap<&'a str, BTreeMap<&'a str, E>>,
    describe: impl Fn(&E, &str) -> String,
) -> String {
    let evidence: Vec<String> = cycle
        .windows(2)
        .map(|pair| describe(&edges[pair[0]][pair[1]], pair[1]))
        .collect();
    format!(
        "import cycle {}:\n{}",
        cycle.join(" -> "),
        evidence.join("\n")
    )
}

/// One import of a file: where, its line, and the node (module or folder) it names.
pub struct Import {
    pub file: String,
    pub line: String,
    pub node: String,
}

/// What breaks the layering of `imports` (each node's imports): a node without a layer, as
/// `unnamed` words it, and an import of a node of a higher layer, or of none.
pub fn layer_violations(
    imports: &BTreeMap<String, Vec<Import>>,
    layer_of: impl Fn(&str) -> Option<u8>,
    unnamed: impl Fn(&str, &[Import]) -> String,
) -> Vec<String> {
    let mut violations = Vec::new();
    for (node, list) in imports {
        let Some(own) = layer_of(node) else {
            violations.push(unnamed(node, list));
            continue;
        };
        for import in list {
            match layer_of(&import.node) {
                Some(theirs) if theirs <= own => {}
                theirs => violations.push(format!(
                    "{} (`{node}`, layer {own}) imports `{}` (layer {}): `{}`",
                    import.file,
                    import.node,
                    theirs.map_or("unknown".to_string(), |l| l.to_string()),
                    import.line
                )),
            }
        }
    }
    violations
}

/// A cycle among the imports between distinct nodes that `counts` keeps (importer and
/// imported), as a message naming the import behind each edge; None for a DAG.
pub fn import_cycle(
    imports: &BTreeMap<String, Vec<Import>>,
    counts: impl Fn(&str) -> bool,
) -> Option<String> {
    let mut edges: BTreeMap<&str, BTreeMap<&str, &Import>> = BTreeMap::new();
    for (node, list) in imports.iter().filter(|(node, _)| counts(node)) {
        for import in list {
            if import.node != *node && counts(&import.node) {
                edges
                    .entry(node)
                    .or_default()
                    .entry(&import.node)
                    .or_insert(import);
            }
        }
    }
    let cycle = find_cycle(&edges)?;
    let describe =
        |import: &&Import, to: &str| format!("{} imports `{to}`: `{}`", import.file, import.line);
    Some(cycle_report(&cycle, &edges, describe))
}
