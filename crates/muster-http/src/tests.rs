//! The shape of the crate itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level module a source file belongs to (`handlers/leases.rs` → `handlers`), or
/// `None` for the crate root and for test files.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    if rel.file_name()? == "tests.rs" || rel == Path::new("lib.rs") {
        return None;
    }
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    Some(first.trim_end_matches(".rs").to_owned())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Who uses whom: for every module, the other modules its code (not its comments, not its
/// tests) names as `crate::…`.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let uses = graph.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let used: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if used != module {
                    uses.insert(used);
                }
            }
        }
    }
    graph
}

#[test]
fn the_modules_of_the_transport_use_each_other_without_a_circle() {
    let graph = module_graph();
    assert!(graph.contains_key("handlers") && graph.contains_key("error"));
    // Depth-first, keeping the path walked: a module met again on it closes a circle.
    fn visit<'a>(
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        module: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(module) {
            return;
        }
        if let Some(at) = path.iter().position(|m| *m == module) {
            panic!("import circle: {} → {module}", path[at..].join(" → "));
        }
        path.push(module);
        for next in graph.get(module).into_iter().flatten() {
            visit(graph, next, path, done);
        }
        path.pop();
        done.insert(module);
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(&graph, module, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_error_table_and_the_metrics_do_not_reach_up_into_the_handlers() {
    let graph = module_graph();
    assert_eq!(
        graph["error"],
        BTreeSet::new(),
        "error.rs uses no other module"
    );
    assert_eq!(
        graph["metrics"],
        BTreeSet::from([
            "error".to_owned(),
            "refreshed".to_owned(),
            "spans".to_owned(),
            "trace".to_owned()
        ]),
        "metrics.rs uses only the error table, the refreshed cell, the call's trace and its spans"
    );
    assert_eq!(
        graph["refreshed"],
        BTreeSet::new(),
        "refreshed.rs uses no other module"
    );
    assert_eq!(
        graph["trace"],
        BTreeSet::new(),
        "trace.rs uses no other module"
    );
}
