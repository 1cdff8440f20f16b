use time::macros::datetime;

use super::*;
use crate::ChainHead;

/// Two items' chains of two entries each, at ledger sequences 1 to 4, interleaved.
fn entries() -> Vec<(u64, SealedEntry)> {
    let mut heads = [ChainHead::genesis(), ChainHead::genesis()];
    (1..=4u64)
        .map(|seq| {
            let i = (seq % 2) as usize;
            let e = Entry {
                subject_type: "item".into(),
                subject_id: format!("item-{i}"),
                event: "noted".into(),
                from_state: None,
                to_state: Some("queued".into()),
                actor: "conn".into(),
                fence: if i == 0 { None } else { Some(seq) },
                at: datetime!(2026-12-02 14:00:00.123456 UTC),
                data: format!("{{\"n\":{seq}}}"),
            };
            (seq, heads[i].seal(e))
        })
        .collect()
}

fn fold(prev: Checkpoint, seq: u64, entries: &[(u64, SealedEntry)]) -> Checkpoint {
    let mut f = CheckpointFold::new(prev, seq);
    for (s, e) in entries.iter().filter(|(s, _)| *s > prev.seq && *s <= seq) {
        f.push(*s, &e.hash).expect("in order");
    }
    f.finish()
}

/// The archive of entries 1 to 4 with checkpoints at 2 and 4, as lines.
fn archive() -> Vec<String> {
    let entries = entries();
    let first = fold(Checkpoint::ORIGIN, 2, &entries);
    let second = fold(first, 4, &entries);
    let header = ArchiveHeader {
        from: Checkpoint::ORIGIN,
        checkpoints: vec![first, second],
    };
    let mut lines = vec![header_line(&header)];
    lines.extend(entries.iter().map(|(s, e)| entry_line(*s, e)));
    lines.push(end_line(4));
    lines
}

fn read(lines: &[String]) -> Result<(ArchiveHeader, u64), ArchiveError> {
    let mut reader = ArchiveReader::default();
    for l in lines {
        reader.line(l)?;
    }
    reader.finish()
}

/// The error reading [`archive`]'s lines back after `edit`: the reader must refuse them.
fn refused(edit: impl FnOnce(&mut Vec<String>)) -> ArchiveError {
    let mut lines = archive();
    edit(&mut lines);
    read(&lines).expect_err("the edited archive is refused")
}

#[test]
fn an_archive_as_written_verifies_from_its_start_to_its_end_checkpoint() {
    let (header, entries) = read(&archive()).expect("verifies");
    assert_eq!((header.from.seq, header.until().seq, entries), (0, 4, 4));
}

#[test]
fn an_entry_changed_in_the_file_is_found() {
    let error = refused(|lines| lines[2] = lines[2].replace("{\\\"n\\\":2}", "{\\\"n\\\":9}"));
    assert_eq!(
        error.to_string(),
        "line 3: subject item:item-0: entry 1 was altered (its hash does not match its contents)"
    );
}

#[test]
fn an_entry_taken_out_of_the_file_is_found() {
    let error = refused(|lines| {
        lines.remove(2);
        lines[4] = end_line(3);
    });
    assert_eq!(error.code(), "E_LEDGER_CHECKPOINT");
}

#[test]
fn an_archive_cut_short_is_truncated() {
    assert_eq!(
        refused(|lines| lines.truncate(4)).to_string(),
        "the archive is truncated: no end line after line 4"
    );
}

#[test]
fn a_file_of_another_format_is_refused() {
    assert_eq!(
        read(&["{\"format\": \"pg_dump\"}".to_owned()]).map_err(|e| e.code()),
        Err("E_ARCHIVE_FOREIGN")
    );
}

#[test]
fn a_later_format_version_is_refused() {
    let error = refused(|lines| lines[0] = lines[0].replace("\"version\":1", "\"version\":2"));
    assert_eq!(
        error.to_string(),
        "not a ledger archive: format version 2 (this binary reads version 1)"
    );
}

#[test]
fn a_header_whose_checkpoints_do_not_end_at_until_is_refused() {
    let error = refused(|lines| {
        let mut v: Value = serde_json::from_str(&lines[0]).expect("json");
        v["until"]["seq"] = json!(3);
        lines[0] = v.to_string();
    });
    assert_eq!(error.code(), "E_ARCHIVE_MALFORMED");
}
