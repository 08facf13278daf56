//! Every item of `weir::prelude` has an example in its documentation, which `cargo test
//! --doc` runs: what a new user imports first is shown in use, and the examples keep
//! compiling as the API changes.

use std::path::{Path, PathBuf};

/// The names `src/prelude.rs` re-exports.
fn prelude_items(source: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut statement = String::new();
    for line in source.lines().filter(|l| !l.trim_start().starts_with("//")) {
        statement.push_str(line);
        if !line.trim_end().ends_with(';') {
            continue;
        }
        if let Some(rest) = statement.trim().strip_prefix("pub use ") {
            let names = match rest.split_once('{') {
                Some((_, list)) => list.trim_end_matches(';').trim_end_matches('}').to_string(),
                None => rest
                    .rsplit("::")
                    .next()
                    .unwrap_or("")
                    .trim_end_matches(';')
                    .to_string(),
            };
            items.extend(
                names
                    .split(',')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty()),
            );
        }
        statement.clear();
    }
    items
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The documentation of the public item `name` defined in `source`, if it is there: the doc
/// comment lines above its definition (attributes in between are passed over).
fn doc_of(source: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    let defines = |line: &str| {
        ["struct", "enum", "trait", "type", "fn"]
            .iter()
            .any(|kind| {
                line.strip_prefix(&format!("pub {kind} {name}"))
                    .is_some_and(|rest| rest.starts_with(['<', ' ', '(', ';', ':', '{']))
            })
    };
    let at = lines.iter().position(|l| defines(l))?;
    let mut doc = Vec::new();
    let mut i = at;
    while i > 0 {
        i -= 1;
        let line = lines[i].trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.to_string());
        } else if line.starts_with("#[") {
            continue;
        } else if line == ")]" {
            // A multi-line attribute: skip to its start.
            while i > 0 && !lines[i].trim().starts_with("#[") {
                i -= 1;
            }
        } else {
            break;
        }
    }
    doc.reverse();
    Some(doc.join("\n"))
}

#[test]
fn every_prelude_item_has_a_runnable_example() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let prelude = std::fs::read_to_string(src.join("prelude.rs")).unwrap();
    let items = prelude_items(&prelude);
    assert!(items.len() > 30, "the prelude was not parsed: {items:?}");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let mut missing = Vec::new();
    for item in &items {
        let doc = sources.iter().find_map(|s| doc_of(s, item));
        match doc {
            None => missing.push(format!("{item}: definition not found")),
            Some(doc) => {
                let example = doc.contains("```") && !doc.contains("```ignore");
                if !example {
                    missing.push(format!("{item}: no example"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "prelude items without a runnable example:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_parser_finds_documented_and_undocumented_items() {
    let source = "/// A thing.\n///\n/// ```\n/// let x = 1;\n/// ```\n#[derive(Debug)]\n#[diagnostic::on_unimplemented(\n    message = \"m\"\n)]\npub struct Thing<T>(T);\n\n/// Nothing to show.\npub fn bare() {}\n";
    assert!(doc_of(source, "Thing").unwrap().contains("```"));
    assert!(!doc_of(source, "bare").unwrap().contains("```"));
    assert!(doc_of(source, "Other").is_none());
    assert_eq!(
        prelude_items("pub use crate::a::{B, C};\npub use crate::d::E;\n// pub use x::Y;\n"),
        ["B", "C", "E"]
    );
}
