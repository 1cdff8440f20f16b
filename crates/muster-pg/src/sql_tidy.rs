//! Where the adapter's statements live: every fixed statement in a `.sql` file in a `sql/`
//! folder beside the module that runs it (`logbook/sql/lease_scan.sql` for `logbook/leases.rs`,
//! `feed/sql/…` for `feed.rs`), loaded with `include_str!`; none assembled with `format!`.
//!
//! Two modules build statements at run time on purpose, and are the only ones allowed to:
//! `logbook/listing.rs` writes its values into the text so that each page is planned for them,
//! and `grants.rs` names the runtime role (an identifier, never a parameter) in its DDL.
//!
//! The checks read the crate's sources as text: string literals (comments and character
//! literals skipped), whether each is the first argument of `format!`, and the `include_str!`
//! paths. Test code (files named `tests.rs` or `*_tests.rs`, and `#[cfg(test)]` modules) is
//! not the adapter's and is not read.

use std::path::{Path, PathBuf};

/// Modules allowed to assemble statements with `format!`, and why.
const ASSEMBLED: &[(&str, &str)] = &[
    (
        "logbook/listing.rs",
        "a page's statement carries its values, planned for them",
    ),
    (
        "grants.rs",
        "the runtime role is an identifier in DDL, not a parameter",
    ),
];

/// Words that begin a statement.
const STATEMENT_WORDS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES", "TABLE", "LISTEN", "NOTIFY",
    "CREATE", "ALTER", "DROP", "GRANT", "REVOKE", "TRUNCATE", "COPY", "CALL", "DO",
];

/// Words any piece of a statement carries (a clause, a join, a statement of its own).
const SQL_WORDS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "FROM", "WHERE", "JOIN", "LISTEN", "NOTIFY", "GRANT",
    "REVOKE", "CREATE",
];

/// A string literal of a source file.
#[derive(Debug, PartialEq, Eq)]
struct Literal {
    line: usize,
    /// As written between the quotes (escapes not resolved).
    text: String,
    /// The first argument of `format!`.
    formatted: bool,
}

/// The string literals of Rust source `src`, in order.
fn literals(src: &str) -> Vec<Literal> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\''), or a lifetime or label ('a).
            if next == Some('\\') {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c == '"' || (c == 'r' && matches!(next, Some('"' | '#'))) {
            let prefix_of_ident = i > 0 && is_ident(chars[i - 1]) && chars[i - 1] != 'b';
            if c == 'r' && prefix_of_ident {
                i += 1;
                continue;
            }
            let formatted = src_before(&chars, i).ends_with("format!(");
            let start_line = line;
            let (text, end) = if c == 'r' {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    // `r#ident`, not a string.
                    i = j;
                    continue;
                }
                let body = j + 1;
                let mut k = body;
                loop {
                    if k >= chars.len() {
                        break;
                    }
                    if chars[k] == '"' && (1..=hashes).all(|h| chars.get(k + h) == Some(&'#')) {
                        break;
                    }
                    k += 1;
                }
                (
                    chars[body..k.min(chars.len())].iter().collect(),
                    k + 1 + hashes,
                )
            } else {
                let mut k = i + 1;
                while k < chars.len() && chars[k] != '"' {
                    k += if chars[k] == '\\' { 2 } else { 1 };
                }
                (
                    chars[i + 1..k.min(chars.len())].iter().collect::<String>(),
                    k + 1,
                )
            };
            line += text.matches('\n').count();
            out.push(Literal {
                line: start_line,
                text,
                formatted,
            });
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The source before `at` with its trailing white space removed.
fn src_before(chars: &[char], at: usize) -> String {
    let mut j = at;
    while j > 0 && chars[j - 1].is_whitespace() {
        j -= 1;
    }
    let from = j.saturating_sub(16);
    chars[from..j].iter().collect()
}

/// Whether `text` has `word` as a whole word.
fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == word)
}

/// Whether `text` reads as a statement: a word that begins one, and more (a privilege name such
/// as `"SELECT"` alone is not).
fn is_statement(text: &str) -> bool {
    let text = text.trim();
    let first = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
        .next()
        .unwrap_or("");
    STATEMENT_WORDS.contains(&first) && text.len() > first.len()
}

/// Whether `text` carries a piece of a statement.
fn has_sql(text: &str) -> bool {
    SQL_WORDS.iter().any(|w| has_word(text, w))
}

/// The adapter's own code of a source file: without its test modules. A `#[cfg(test)] mod x;`
/// declaration is left out; an inline `#[cfg(test)] mod x { … }` ends the code (test modules
/// come last: clippy's `items_after_test_module`).
fn adapter_code(src: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut code = String::new();
    let mut rest = src;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let item = after.trim_start();
        let declaration = item
            .find(';')
            .filter(|end| item.starts_with("mod ") && !item[..*end].contains('{'));
        code.push_str(&rest[..at]);
        if let Some(end) = declaration {
            rest = &item[end + 1..];
        } else if item.starts_with("mod ") {
            return code;
        } else {
            code.push_str(MARK);
            rest = after;
        }
    }
    code.push_str(rest);
    code
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file under `dir` whose name ends with `ext`, sorted.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.to_string_lossy().ends_with(ext) {
            out.push(path);
        }
    }
}

/// The adapter's source files (not the tests'), each with its path under `src/` and its code.
fn adapter_sources() -> Vec<(String, String)> {
    let root = src_dir();
    let mut paths = Vec::new();
    files(&root, ".rs", &mut paths);
    paths
        .into_iter()
        .filter(|p| {
            let name = p
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into());
            name != "tests.rs" && !name.ends_with("_tests.rs") && name != "sql_tidy.rs"
        })
        .map(|p| {
            let src = std::fs::read_to_string(&p).expect("read a source file");
            let rel = p
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, adapter_code(&src))
        })
        .collect()
}

/// `file:line: text` for each literal of `sources` that `bad` picks.
fn findings(sources: &[(String, String)], bad: impl Fn(&str, &Literal) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (path, code) in sources {
        for lit in literals(code) {
            if bad(path, &lit) {
                let first = lit.text.trim().lines().next().unwrap_or("");
                found.push(format!("{path}:{}: {first}", lit.line));
            }
        }
    }
    found
}

/// A statement written in Rust: a plain string literal that begins a statement.
fn inline_statement(_path: &str, lit: &Literal) -> bool {
    !lit.formatted && is_statement(&lit.text)
}

/// A statement assembled with `format!` outside the modules allowed to ([`ASSEMBLED`]).
fn assembled_statement(path: &str, lit: &Literal) -> bool {
    lit.formatted && has_sql(&lit.text) && !ASSEMBLED.iter().any(|(p, _)| *p == path)
}

/// The `.sql` files a source file includes, as paths under `src/`, resolved from its folder.
fn included(path: &str, code: &str) -> Vec<String> {
    let dir = Path::new(path).parent().unwrap_or(Path::new(""));
    code.match_indices("include_str!(\"")
        .filter_map(|(at, m)| {
            let rest = &code[at + m.len()..];
            let file = &rest[..rest.find('"')?];
            file.ends_with(".sql")
                .then(|| dir.join(file).to_string_lossy().replace('\\', "/"))
        })
        .collect()
}

/// `text` without `--` comments and with its white space collapsed.
fn normalized(text: &str) -> String {
    text.lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_fixed_statement_of_the_adapter_is_in_a_sql_file() {
    let found = findings(&adapter_sources(), inline_statement);
    assert!(
        found.is_empty(),
        "statements written in Rust: move each to a .sql file in the module's sql/ folder and \
         include_str! it:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_statement_is_assembled_with_format() {
    let found = findings(&adapter_sources(), assembled_statement);
    assert!(
        found.is_empty(),
        "statements assembled with format!: write each as a static statement in a .sql file \
         (repeat a column list rather than splice it in):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_sql_file_is_used_and_lives_in_a_sql_folder() {
    let root = src_dir();
    let mut sql = Vec::new();
    files(&root, ".sql", &mut sql);
    let used: Vec<String> = adapter_sources()
        .iter()
        .flat_map(|(path, code)| included(path, code))
        .collect();
    let mut unused = Vec::new();
    for path in sql {
        let rel = path
            .strip_prefix(&root)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let in_sql_folder = Path::new(&rel)
            .parent()
            .and_then(|p| p.file_name())
            .is_some_and(|n| n == "sql");
        if !in_sql_folder || !used.contains(&rel) {
            unused.push(rel);
        }
    }
    assert!(
        unused.is_empty(),
        "SQL files outside a sql/ folder or included by no adapter code: {unused:?}"
    );
}

/// The statements whose rows a mapper reads by position list the mapper's columns, in its
/// order (each statement spells them out instead of splicing the constant in).
#[test]
fn statements_list_the_columns_their_row_mappers_read() {
    let item_cols = normalized(crate::logbook::ITEM_COLS);
    let event_cols = normalized(crate::feed::EVENT_COLS);
    let statements: &[(&str, &str, &str)] = &[
        (
            "lease_scan",
            include_str!("logbook/sql/lease_scan.sql"),
            &item_cols,
        ),
        (
            "lock_leases",
            include_str!("logbook/sql/lock_leases.sql"),
            &item_cols,
        ),
        (
            "lock_item",
            include_str!("logbook/sql/lock_item.sql"),
            &item_cols,
        ),
        (
            "lock_parked",
            include_str!("logbook/sql/lock_parked.sql"),
            &item_cols,
        ),
        ("backlog", include_str!("feed/sql/backlog.sql"), &event_cols),
        (
            "read_after",
            include_str!("feed/sql/read_after.sql"),
            &event_cols,
        ),
    ];
    for (name, sql, cols) in statements {
        assert!(
            normalized(sql).contains(*cols),
            "{name}.sql does not list the columns its mapper reads: {cols}"
        );
    }
    // The lease scan answers the item's columns first, as `item_from_row(row, 0)` reads them.
    let scan = normalized(include_str!("logbook/sql/lease_scan.sql"));
    let answer = &scan[scan.rfind(") SELECT ").expect("the final SELECT") + 2..];
    assert!(
        answer.starts_with(&format!("SELECT {item_cols},")),
        "{answer}"
    );
}

#[test]
fn the_checker_finds_statements_written_inline_or_with_format() {
    let src = r##"
        // "SELECT in a comment" is not code
        let c = '"'; let l: &'static str = "x";
        client.query("SELECT 1 FROM core.items", &[]);
        let sql = format!(
            "SELECT {ITEM_COLS} FROM core.items i WHERE i.id = $1"
        );
        let branch = format!("q{s} AS (SELECT * FROM core.items)");
        let raw = r#"WITH w AS (DELETE FROM core.x) TABLE w"#;
        let message = format!("bad priority {priority}");
        tx.query(include_str!("sql/lock_item.sql"), &[]);
        /* "INSERT INTO in a block comment" */
    "##;
    let lits = literals(src);
    let texts: Vec<(&str, bool)> = lits
        .iter()
        .map(|l| (l.text.as_str(), l.formatted))
        .collect();
    assert_eq!(
        texts,
        [
            ("x", false),
            ("SELECT 1 FROM core.items", false),
            ("SELECT {ITEM_COLS} FROM core.items i WHERE i.id = $1", true),
            ("q{s} AS (SELECT * FROM core.items)", true),
            ("WITH w AS (DELETE FROM core.x) TABLE w", false),
            ("bad priority {priority}", true),
            ("sql/lock_item.sql", false),
        ]
    );
    assert_eq!(lits[1].line, 4);
    let sources = [("logbook/x.rs".to_owned(), src.to_owned())];
    assert_eq!(
        findings(&sources, inline_statement),
        [
            "logbook/x.rs:4: SELECT 1 FROM core.items",
            "logbook/x.rs:9: WITH w AS (DELETE FROM core.x) TABLE w",
        ]
    );
    assert_eq!(
        findings(&sources, assembled_statement),
        [
            "logbook/x.rs:6: SELECT {ITEM_COLS} FROM core.items i WHERE i.id = $1",
            "logbook/x.rs:8: q{s} AS (SELECT * FROM core.items)",
        ]
    );
    let listing = [("logbook/listing.rs".to_owned(), src.to_owned())];
    assert_eq!(
        findings(&listing, assembled_statement),
        Vec::<String>::new()
    );
    assert_eq!(
        included("logbook/items.rs", src),
        ["logbook/sql/lock_item.sql"]
    );
}

#[test]
fn test_code_and_transaction_control_are_not_statements_to_move() {
    assert!(!is_statement("BEGIN"));
    assert!(!is_statement("COMMIT"));
    assert!(!is_statement("ROLLBACK"));
    assert!(!is_statement("the idle probe went unanswered"));
    assert!(!is_statement("SELECT"));
    assert!(is_statement("  SELECT 1"));
    assert!(is_statement("WITH w AS (SELECT 1) TABLE w"));
    assert_eq!(
        adapter_code("fn a() {}\n#[cfg(test)]\nmod tests { \"SELECT 1\"; }"),
        "fn a() {}\n"
    );
    assert_eq!(
        adapter_code("mod a;\n#[cfg(test)]\nmod tests;\nmod b;\n#[cfg(test)]\nconst C: u8 = 1;"),
        "mod a;\n\nmod b;\n#[cfg(test)]\nconst C: u8 = 1;"
    );
    assert_eq!(
        normalized("SELECT a, -- the a\n  b\nFROM t"),
        "SELECT a, b FROM t"
    );
}
