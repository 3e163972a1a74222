//! The crate's module graph is a DAG of layers, and stays one. Each file of `src/` belongs to
//! a layer by where it sits:
//!
//! | layer | modules                                                                 |
//! |-------|-------------------------------------------------------------------------|
//! | 0     | `wire/`, and the shared vocabulary `packet`, `verdict`, `counters`, `hash`, `ratelimit` |
//! | 1     | `flow` (the 5-tuple), `l3/` (FIB, neighbours, fragmentation), `pppoe/` (the PPPoE client), `portmap/` (PCP, NAT-PMP) |
//! | 2     | `state/` (conntrack, NAT, per-host limits, firewall rules, flow data)   |
//! | 3     | `features/` (QoS, meters, content blocking, parental control)            |
//! | 4     | `pipeline/` (the `Pipeline`, its stages, the router config)              |
//!
//! The rules, read from the source text (comments aside: a doc link is not a dependency):
//! - a file may name (`use crate::x`, `crate::x::y`, `use crate::{x, ..}`) only modules of
//!   its own layer or lower ones; a root re-export (`crate::Pipeline`) counts as the module it
//!   re-exports;
//! - the modules of one layer (`state::nat`, `state::conntrack`, `verdict`, ...) do not
//!   import each other in a cycle either; in the top layer, `pipeline` (its `mod.rs`: the
//!   `Pipeline` and its lifecycle) and each stage file (`pipeline::stateful`,
//!   `pipeline::fast_path`, ...) are nodes of their own, and the types the stages hand each
//!   other live in a leaf (`pipeline::stage`).
//!
//! Besides `crate::` paths, a file's `super::` paths and a group's `mod.rs` importing its own
//! children (`pub use client::Client`) count, so that no edge hides behind a relative path.
//!
//! A new file outside these places fails the test until it is given a layer here.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

#[path = "support/import_graph.rs"]
mod import_graph;

use import_graph::{rust_files, Import};

/// The layer of a top-level module of the crate, `None` for one this test does not know.
fn layer_of_module(name: &str) -> Option<u8> {
    Some(match name {
        "wire" | "packet" | "verdict" | "counters" | "hash" | "ratelimit" => 0,
        "flow" | "l3" | "pppoe" | "portmap" => 1,
        "state" => 2,
        "features" => 3,
        "pipeline" => 4,
        _ => return None,
    })
}

/// Top-level modules that are directories of modules: their children are the graph's nodes.
const GROUPS: [&str; 6] = ["l3", "pppoe", "portmap", "state", "features", "pipeline"];

/// The node a path (`state::nat::rewrite::fold`, `verdict::DropReason`) belongs to:
/// `state::nat`, `verdict`.
fn node_of_path(segments: &[&str]) -> String {
    match segments {
        [group, child, ..] if GROUPS.contains(group) && is_module_name(child) => {
            format!("{group}::{child}")
        }
        [first, ..] => first.to_string(),
        [] => String::new(),
    }
}

fn is_module_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
}

/// The module path of a file under `src/`: `state/nat/rewrite.rs` is `state::nat::rewrite`,
/// `pipeline/mod.rs` is `pipeline`.
fn module_of_file(relative: &Path) -> Vec<String> {
    let mut segments: Vec<String> = relative
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    segments
}

/// The node of a file under `src/`: `state/nat/rewrite.rs` is `state::nat`,
/// `pipeline/mod.rs` is `pipeline`, `verdict.rs` is `verdict`.
fn node_of_file(relative: &Path) -> String {
    let segments = module_of_file(relative);
    let refs: Vec<&str> = segments.iter().map(String::as_str).collect();
    node_of_path(&refs)
}

/// The paths a line of code names after `crate::`, as segments; a group
/// (`crate::{wire::ipv4, flow::FlowKey}`) gives one path per member.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                let path = segments(member.trim());
                if !path.is_empty() {
                    paths.push(path);
                }
            }
        } else {
            paths.push(segments(rest));
        }
    }
    paths
}

/// `a::b::C rest` as `["a", "b", "C"]`.
fn segments(text: &str) -> Vec<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    text[..end]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The paths a line names relative to its file's module `module` (`["pppoe", "client"]` for
/// `pppoe/client.rs`): `super::x` is the parent's `x`, and, in a `mod.rs` whose children are
/// `children`, `use child::x` and `self::child::x` are the child's `x`. As segments from the
/// crate root; a group (`super::{a, b}`) gives one path per member.
fn relative_paths(code: &str, module: &[&str], children: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut push = |prefix: &[&str], rest: &str| {
        let members: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for member in members {
            let tail = segments(member.trim());
            if !tail.is_empty() {
                let mut path: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
                path.extend(tail);
                paths.push(path);
            }
        }
    };
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "super::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        push(&module[..module.len().saturating_sub(1)], rest);
    }
    let statement = code.trim_start().trim_start_matches("pub ");
    if let Some(used) = statement.strip_prefix("use ") {
        let used = used.strip_prefix("self::").unwrap_or(used);
        let first = used.split("::").next().unwrap_or("");
        if children.iter().any(|child| child == first) {
            match used.find("::{") {
                Some(brace) => {
                    let mut prefix = module.to_vec();
                    prefix.extend(used[..brace].split("::"));
                    push(&prefix, &used[brace + 2..]);
                }
                None => push(module, used),
            }
        }
    }
    paths
}

/// The child modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_children(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let after = line.split("mod ").nth(1)?;
            let words = line.split("mod ").next()?;
            if !(words.is_empty() || words.starts_with("pub")) || !line.ends_with(';') {
                return None;
            }
            Some(after.trim_end_matches(';').trim().to_string())
        })
        .collect()
}

/// What the crate root re-exports, by name: `Pipeline` is `pipeline`'s, `DropReason` is
/// `verdict`'s. Read from `lib.rs`'s `pub use` items.
fn root_reexports(lib: &str) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    let code = strip_comments(lib);
    for item in code.split(';') {
        let Some(start) = item.find("pub use ") else {
            continue;
        };
        let item = item[start + "pub use ".len()..].replace(char::is_whitespace, "");
        let (prefix, members) = match item.find("::{") {
            Some(brace) => (
                item[..brace].to_string(),
                item[brace + 3..].trim_end_matches('}').to_string(),
            ),
            None => match item.rfind("::") {
                Some(last) => (item[..last].to_string(), item[last + 2..].to_string()),
                None => continue,
            },
        };
        let module: Vec<String> = prefix.split("::").map(str::to_string).collect();
        for member in members.split(',').filter(|m| !m.is_empty()) {
            let name = member.rsplit("::").next().unwrap_or(member);
            names.insert(name.to_string(), module.clone());
        }
    }
    names
}

/// The source without its comment lines (`//`, `//!`, `///`).
fn strip_comments(source: &str) -> String {
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every import of every file under `src` but `lib.rs` (which re-exports from all layers),
/// by the importing file's node.
fn imports(src: &Path) -> BTreeMap<String, Vec<Import>> {
    let reexports = root_reexports(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut by_node: BTreeMap<String, Vec<Import>> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(src).expect("under src").to_path_buf();
        if relative == Path::new("lib.rs") {
            continue;
        }
        let node = node_of_file(&relative);
        let source = fs::read_to_string(&path).expect("a readable source file");
        let module = module_of_file(&relative);
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        let children = declared_children(&strip_comments(&source));
        let entry = by_node.entry(node).or_default();
        for line in strip_comments(&source).lines() {
            let mut paths = crate_paths(line);
            paths.extend(relative_paths(line, &module, &children));
            for path in paths {
                let mut segments: Vec<&str> = path.iter().map(String::as_str).collect();
                let resolved;
                if let Some(module) = segments.first().and_then(|first| reexports.get(*first)) {
                    resolved = module.iter().map(String::as_str).collect::<Vec<_>>();
                    segments = resolved;
                }
                entry.push(Import {
                    file: relative.display().to_string(),
                    line: line.trim().to_string(),
                    node: node_of_path(&segments),
                });
            }
        }
    }
    by_node
}

fn layer_of_node(node: &str) -> Option<u8> {
    layer_of_module(node.split("::").next().unwrap_or(node))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let unnamed = |node: &str, imports: &[Import]| {
        let file = imports.first().map_or("?", |i| i.file.as_str());
        format!("{file}: module `{node}` has no layer: give it one in tests/layout.rs")
    };
    let violations = import_graph::layer_violations(&imports(&src()), layer_of_node, unnamed);
    assert!(
        violations.is_empty(),
        "layering broken:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_modules_import_each_other_without_a_cycle() {
    let has_layer = |node: &str| layer_of_node(node).is_some();
    if let Some(cycle) = import_graph::import_cycle(&imports(&src()), has_layer) {
        panic!("{cycle}");
    }
}

/// The checker reads the forms of import the crate uses, so that a violation cannot hide in
/// one it skips.
#[test]
fn the_checker_reads_every_form_of_import() {
    let paths = |code: &str| -> Vec<String> {
        crate_paths(code)
            .iter()
            .map(|p| node_of_path(&p.iter().map(String::as_str).collect::<Vec<_>>()))
            .collect()
    };
    assert_eq!(paths("use crate::wire::ipv4::GENERATED_TTL;"), ["wire"]);
    assert_eq!(
        paths("use crate::{state::nat::NatPool, verdict};"),
        ["state::nat", "verdict"]
    );
    assert_eq!(
        paths("let x = crate::features::qos::Qos::new(crate::hash::seed());"),
        ["features::qos", "hash"]
    );
    assert_eq!(
        paths("macro_rules! m { () => { $crate::wire } }"),
        Vec::<String>::new()
    );
    assert_eq!(
        node_of_file(Path::new("state/nat/rewrite.rs")),
        "state::nat"
    );
    assert_eq!(node_of_file(Path::new("pipeline/mod.rs")), "pipeline");
    assert_eq!(node_of_file(Path::new("verdict.rs")), "verdict");
    assert_eq!(layer_of_node("pipeline::stateful"), Some(4));
    assert_eq!(
        relative_paths("use super::wire::Packet;", &["pppoe", "client"], &[]),
        [vec!["pppoe", "wire", "Packet"]]
    );
    assert_eq!(
        relative_paths(
            "pub use client::{Client, State};",
            &["pppoe"],
            &["client".to_string()]
        ),
        [
            vec!["pppoe", "client", "Client"],
            vec!["pppoe", "client", "State"]
        ]
    );
    assert_eq!(
        relative_paths("x = super::is_broadcast(a);", &["pipeline", "punt"], &[]),
        [vec!["pipeline", "is_broadcast"]]
    );
    assert_eq!(layer_of_node("state::conntrack"), Some(2));

    let reexports = root_reexports(
        "pub use pipeline::config::{\n    IcmpLimits, RouterConfig,\n};\npub use verdict::DropReason;",
    );
    assert_eq!(reexports["RouterConfig"], ["pipeline", "config"]);
    assert_eq!(reexports["DropReason"], ["verdict"]);
}
