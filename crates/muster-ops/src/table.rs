//! Plain-text tables for people: columns padded to their widest cell, two spaces apart,
//! numbers right-aligned. (A dozen lines; a table crate would bring box drawing and terminal
//! width detection that output meant for `grep` and `less` does not want.)

use std::fmt::Write as _;

/// A column's heading and alignment.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub title: &'static str,
    pub right: bool,
}

pub const fn left(title: &'static str) -> Column {
    Column {
        title,
        right: false,
    }
}

pub const fn right(title: &'static str) -> Column {
    Column { title, right: true }
}

/// The table as lines (heading first), each ending in `\n`, no trailing spaces.
pub fn render(columns: &[Column], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|cell| cell.chars().count())
                .chain([c.title.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let heading: Vec<String> = columns.iter().map(|c| c.title.to_owned()).collect();
    for row in std::iter::once(&heading).chain(rows) {
        out.push_str(&line(columns, &widths, row));
    }
    out
}

/// One row padded to `widths` (a row of a table printed page by page with fixed widths).
pub fn line(columns: &[Column], widths: &[usize], row: &[String]) -> String {
    let mut out = String::new();
    for (i, (c, w)) in columns.iter().zip(widths).enumerate() {
        let cell = row.get(i).map_or("", String::as_str);
        if i > 0 {
            out.push_str("  ");
        }
        if c.right {
            let _ = write!(out, "{cell:>w$}");
        } else {
            let _ = write!(out, "{cell:<w$}");
        }
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_numbers_align_right() {
        let t = render(
            &[left("KIND"), right("COUNT"), left("NOTE")],
            &[
                vec!["trawl".into(), "7".into(), String::new()],
                vec!["countersign".into(), "1200".into(), "slow".into()],
            ],
        );
        assert_eq!(
            t,
            "KIND         COUNT  NOTE\ntrawl            7\ncountersign   1200  slow\n"
        );
    }
}
