//! A port method takes at most three arguments besides `self`; more travel in one named struct
//! defined beside its trait (one parameter struct per query, as River's driver interface
//! passes them: [`super::LeasableQuery`]). Checked on the sources of `ports/` (every `fn` there,
//! the mock excepted: it repeats the traits).

use std::path::Path;

const MOST: usize = 3;

/// Each `fn` of Rust source `src` that starts a line, with its arguments besides `self`.
fn arguments(src: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in src.match_indices("fn ") {
        let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
        let before = src[line_start..at].trim();
        if !matches!(before, "" | "async" | "pub" | "pub async" | "pub(crate)") {
            continue;
        }
        let rest = &src[at + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = rest.find('(') else { continue };
        let mut depth = 0usize;
        let mut piece = String::new();
        let mut pieces = Vec::new();
        let mut chars = rest[open..].chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '-' if chars.peek() == Some(&'>') => {
                    chars.next();
                    piece.push_str("->");
                    continue;
                }
                '(' | '[' | '<' => depth += 1,
                ')' | ']' | '>' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 {
                break;
            }
            if c == ',' && depth == 1 {
                pieces.push(std::mem::take(&mut piece));
            } else if !(depth == 1 && c == '(') {
                piece.push(c);
            }
        }
        pieces.push(piece);
        let count = pieces
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .filter(|p| {
                let p = p.trim_start_matches('&').trim_start_matches("mut ");
                !(p == "self" || p.starts_with("self:"))
            })
            .count();
        out.push((name, count));
    }
    out
}

#[test]
fn port_methods_take_at_most_three_arguments_besides_self() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ports");
    let mut over = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("read src/ports") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into());
        if !name.ends_with(".rs") || name == "mock.rs" || name == "tidy.rs" {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("read a port");
        for (f, n) in arguments(&src) {
            seen += 1;
            if n > MOST {
                over.push(format!("{name}: {f} takes {n}"));
            }
        }
    }
    assert!(seen > 20, "only {seen} methods found: the reader is broken");
    assert!(
        over.is_empty(),
        "port methods with more than {MOST} arguments besides self; pass one named struct \
         defined beside the trait instead:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_reader_counts_arguments_besides_self_at_the_top_level_only() {
    let src = "
        /// Not a fn declaration: fn x(a, b, c, d, e).
        async fn lock(&mut self, wanted: LeasableQuery) -> Result<(), E>;
        async fn many(
            &mut self,
            kind: Kind,
            pairs: &[(LeaseId, LeaseOutcome)],
            f: Box<dyn Fn(&Item, u32) -> bool>,
            at: OffsetDateTime,
        ) -> Result<(), E>;
        fn commit(self: Box<Self>) -> Result<(), E>;
        pub fn reclaimable(&self, attempt: u32, expires_at: OffsetDateTime, now: OffsetDateTime) -> bool {
    ";
    assert_eq!(
        arguments(src),
        [
            ("lock".to_owned(), 1),
            ("many".to_owned(), 4),
            ("commit".to_owned(), 0),
            ("reclaimable".to_owned(), 3),
        ]
    );
}
