//! `gateway/src`'s folders form a DAG of layers, and stay one. Each file of `src/` belongs to
//! its top-level module (`telemetry/nat_log/ipfix.rs` is `telemetry`), and each top-level
//! module to a layer:
//!
//! | layer | modules                                                                      |
//! |-------|------------------------------------------------------------------------------|
//! | 0     | `dpdk` (the safe layer over DPDK; every `unsafe` block)                      |
//! | 1     | `config` (the file's schema, validation, history and store)                  |
//! | 2     | `dataplane` (the worker loop and what it shares with the control thread)     |
//! | 3     | `control` (neighbours, twins, netlink, PPPoE), `compile` (config to pipeline) |
//! | 4     | `reload` (load, watch, diff), `telemetry` (metrics, logs, port and bond watch) |
//! | 5     | `ctl` (the operator's socket: server, client, config requests)               |
//! | 6     | `runtime` (start, the event loop, teardown)                                  |
//! | 7     | `bench` (`gateway bench` and its lab)                                        |
//!
//! The rules, read from the source text (comments aside: a doc link is not a dependency):
//! - a file may name (`use crate::x`, `crate::x::y`, `use crate::{x, ..}`) only modules of
//!   its own layer or lower ones;
//! - the modules of one layer do not import each other in a cycle;
//! - test code is exempt (a test may build the whole stack): files named `tests.rs` or
//!   `*_tests.rs` or under a `tests/` folder, and items marked `#[cfg(test)]` at the start of a
//!   line;
//! - `lib.rs` (which declares every module) and `main.rs` (the binary, which uses the library
//!   as `gateway::`) are not nodes.
//!
//! A new top-level module fails the test until it is given a layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[path = "../../pipeline/tests/support/import_graph.rs"]
mod import_graph;

use import_graph::{rust_files, Import};

/// The layer of a top-level module of `gateway/src`, `None` for one this test does not know.
fn layer_of(module: &str) -> Option<u8> {
    Some(match module {
        "dpdk" => 0,
        "config" => 1,
        "dataplane" => 2,
        "control" | "compile" => 3,
        "reload" | "telemetry" => 4,
        "ctl" => 5,
        "runtime" => 6,
        "bench" => 7,
        _ => return None,
    })
}

/// The top-level module of a file under `src/`: `telemetry/nat_log/ipfix.rs` is `telemetry`,
/// `config/mod.rs` is `config`, `lib.rs` is `lib`.
fn module_of_file(relative: &Path) -> String {
    let first = relative
        .iter()
        .next()
        .map(|s| s.to_string_lossy().to_string());
    first
        .unwrap_or_default()
        .trim_end_matches(".rs")
        .to_string()
}

/// The top-level modules a line of code names after `crate::`; a group
/// (`crate::{config::GatewayConfig, dpdk::Mbuf}`) gives one per member.
fn crate_modules(code: &str) -> Vec<String> {
    let mut modules = Vec::new();
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
                let name = first_segment(member.trim());
                if !name.is_empty() {
                    modules.push(name);
                }
            }
        } else {
            modules.push(first_segment(rest));
        }
    }
    modules
}

/// `a::b::C rest` as `a`.
fn first_segment(text: &str) -> String {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text[..end].to_string()
}

/// The lines of a source file that are not comments and not test code: an item after a
/// `#[cfg(test)]` at the start of a line is skipped up to its end (a line starting with `}` or
/// `)`, or its own first line where that ends with `;`).
fn code_lines(source: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut iter = source.lines();
    while let Some(line) = iter.next() {
        if line == "#[cfg(test)]" {
            let mut first = true;
            for item in iter.by_ref() {
                if item.starts_with("#[") {
                    continue;
                }
                if (first && item.ends_with(';'))
                    || (!first && (item.starts_with('}') || item.starts_with(')')))
                {
                    break;
                }
                first = false;
            }
            continue;
        }
        if !line.trim_start().starts_with("//") {
            lines.push(line);
        }
    }
    lines
}

fn is_test_file(relative: &Path) -> bool {
    relative.file_name().is_some_and(|name| {
        let name = name.to_string_lossy();
        name == "tests.rs" || name.ends_with("_tests.rs")
    }) || relative.iter().any(|segment| segment == "tests")
}

/// Every import of every file under `src` but `lib.rs`, `main.rs` and test code, by the
/// importing file's top-level module (every module appears, importing or not).
fn imports(src: &Path) -> BTreeMap<String, Vec<Import>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut by_module: BTreeMap<String, Vec<Import>> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(src).expect("under src").to_path_buf();
        if relative == Path::new("lib.rs") || relative == Path::new("main.rs") {
            continue;
        }
        let module = module_of_file(&relative);
        let entry = by_module.entry(module).or_default();
        if is_test_file(&relative) {
            continue;
        }
        let source = fs::read_to_string(&path).expect("a readable source file");
        for line in code_lines(&source) {
            let named = crate_modules(line).into_iter().chain(
                line.contains("super::super")
                    .then(|| "super::super".to_string()),
            );
            for module in named {
                entry.push(Import {
                    file: relative.display().to_string(),
                    line: line.trim().to_string(),
                    node: module,
                });
            }
        }
    }
    by_module
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_has_a_layer_and_imports_none_above_it() {
    let unnamed = |module: &str, _: &[Import]| {
        format!("src/{module}: top-level module `{module}` has no layer: give it one in tests/layout.rs")
    };
    let violations = import_graph::layer_violations(&imports(&src()), layer_of, unnamed);
    assert!(
        violations.is_empty(),
        "layering broken:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_folders_import_each_other_without_a_cycle() {
    if let Some(cycle) = import_graph::import_cycle(&imports(&src()), |_| true) {
        panic!("{cycle}");
    }
}

/// Every top-level module `lib.rs` declares has a layer, and every one with a layer exists: the
/// table above stays the crate's.
#[test]
fn the_table_names_the_crates_modules() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let declared: BTreeSet<String> = code_lines(&lib)
        .iter()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').to_string())
        .collect();
    let unknown: Vec<&String> = declared.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(unknown.is_empty(), "modules without a layer: {unknown:?}");
    let found: BTreeSet<String> = imports(&src()).into_keys().collect();
    assert_eq!(
        declared, found,
        "lib.rs's modules and src/'s top-level files differ"
    );
}

/// The checker reads the forms of import the crate uses, so that a violation cannot hide in
/// one it skips.
#[test]
fn the_checker_reads_every_form_of_import() {
    assert_eq!(crate_modules("use crate::dpdk::mbuf::Mbuf;"), ["dpdk"]);
    assert_eq!(
        crate_modules("use crate::{config::GatewayConfig, dpdk};"),
        ["config", "dpdk"]
    );
    assert_eq!(
        crate_modules("let x = crate::control::twins::Twins::new(crate::dpdk::rdtsc());"),
        ["control", "dpdk"]
    );
    assert_eq!(
        crate_modules("macro_rules! m { () => { $crate::config } }"),
        Vec::<String>::new()
    );
    assert_eq!(
        module_of_file(Path::new("telemetry/nat_log/ipfix.rs")),
        "telemetry"
    );
    assert_eq!(module_of_file(Path::new("config/mod.rs")), "config");
    assert!(is_test_file(Path::new("config/tests.rs")));
    assert!(is_test_file(Path::new("compile/router/pppoe_tests.rs")));
    assert!(is_test_file(Path::new("config/tests/schema.rs")));
    assert!(!is_test_file(Path::new("config/twins.rs")));

    let source = "use crate::dpdk::Mbuf;\n\
                  #[cfg(test)]\n\
                  use crate::runtime::app;\n\
                  #[cfg(test)]\n\
                  type Record = (\n    crate::bench::X,\n);\n\
                  // crate::ctl in a comment\n\
                  fn f() {}\n\
                  #[cfg(test)]\n\
                  mod tests {\n    use crate::bench::lab;\n}\n\
                  fn g() { crate::config::x(); }";
    let named: Vec<String> = code_lines(source)
        .iter()
        .flat_map(|line| crate_modules(line))
        .collect();
    assert_eq!(named, ["dpdk", "config"]);
}
