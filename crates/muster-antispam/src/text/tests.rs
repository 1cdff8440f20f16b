use proptest::prelude::*;

use super::*;

fn text(html: &str) -> String {
    to_plain_text(html)
}

/// No `<` followed by an ASCII letter, `/`, `!` or `?`; no `&` followed by an ASCII letter
/// or digit or `#`.
fn is_markup_inert(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().all(|(i, &b)| {
        let next = bytes.get(i + 1).copied();
        match b {
            b'<' => !matches!(next, Some(n) if n.is_ascii_alphabetic() || b"/!?".contains(&n)),
            b'&' => !matches!(next, Some(n) if n.is_ascii_alphanumeric() || n == b'#'),
            _ => true,
        }
    })
}

#[test]
fn bold_tags_are_removed() {
    assert_eq!(text("<b>hi</b>"), "hi");
}

#[test]
fn script_contents_are_dropped() {
    assert_eq!(text("<script>alert(1)</script>ok"), "ok");
}

#[test]
fn style_contents_are_dropped() {
    assert_eq!(text("<style>p{}</style>x"), "x");
}

#[test]
fn other_raw_text_contents_are_dropped() {
    for tag in ["xmp", "iframe", "noembed", "noframes", "noscript"] {
        let html = format!("a<{tag}><b>x</b> &amp; y</{tag}>b");
        assert_eq!(text(&html), "ab", "{tag}");
    }
}

#[test]
fn markup_inside_script_does_not_end_it() {
    assert_eq!(text("<script>document.write('</p><b>x')</script>ok"), "ok");
    assert_eq!(text("<script><!--<script>x</script>y--></script>ok"), "ok");
}

#[test]
fn unclosed_script_drops_the_rest() {
    assert_eq!(text("a<script>alert(1)"), "a");
}

#[test]
fn template_contents_are_dropped_with_nesting() {
    assert_eq!(
        text("a<template>x<template>y</template>z</template>b"),
        "ab"
    );
}

#[test]
fn stray_template_end_tag_is_ignored() {
    assert_eq!(text("a</template>b"), "ab");
}

#[test]
fn everything_after_plaintext_is_dropped() {
    assert_eq!(text("a<plaintext><b>x</b></plaintext>y"), "a");
}

#[test]
fn title_and_textarea_text_is_kept_as_text() {
    assert_eq!(text("<title>a<b>c</b> &amp;</title>"), "a<b>c</b> &");
    assert_eq!(text("<textarea><i>x</i></textarea>"), "<i>x</i>");
}

#[test]
fn ampersand_entity_is_decoded() {
    assert_eq!(text("a &amp; b"), "a & b");
}

#[test]
fn entities_are_decoded_exactly_once() {
    assert_eq!(text("&amp;lt;"), "&lt;");
    assert_eq!(text("&amp;amp;"), "&amp;");
    assert_eq!(text("&lt;b&gt;x&lt;/b&gt;"), "<b>x</b>");
}

#[test]
fn numeric_and_legacy_references_are_decoded() {
    assert_eq!(
        text("&#60;&#x3E;&#x20AC;&copy &notit; &notin;"),
        "<>€© ¬it; \u{2209}"
    );
}

#[test]
fn unknown_and_bare_ampersands_stay() {
    assert_eq!(text("a & b && c &zz; &#;"), "a & b && c &zz; &#;");
}

#[test]
fn second_html_pass_over_output_would_decode_entities_twice() {
    // Why the stored text is re-stripped with `clean_text`, never with `to_plain_text`.
    let once = text("&amp;lt;b&amp;gt;");
    assert_eq!(once, "&lt;b&gt;");
    assert_eq!(text(&once), "<b>");
    assert_eq!(clean_text(&once), once);
}

#[test]
fn lone_angle_brackets_stay() {
    assert_eq!(text("if a < b && c > d"), "if a < b && c > d");
    assert_eq!(text("x<"), "x<");
}

#[test]
fn bidi_override_and_zero_width_space_are_removed() {
    assert_eq!(text("x\u{202E}y\u{200B}z"), "xyz");
}

#[test]
fn referenced_bidi_override_is_removed() {
    assert_eq!(text("x&#x202E;y&#8203;z"), "xyz");
}

#[test]
fn combining_sequence_is_nfc_normalised() {
    assert_eq!(text("e\u{0301}"), "\u{e9}");
}

#[test]
fn comment_is_dropped() {
    assert_eq!(text("<!-- c -->t"), "t");
}

#[test]
fn unterminated_comment_drops_the_rest() {
    assert_eq!(text("a<!-- b"), "a");
}

#[test]
fn doctype_cdata_and_processing_instructions_are_dropped() {
    assert_eq!(text("<!DOCTYPE html><![CDATA[x]]><?php y ?>z"), "z");
}

#[test]
fn image_with_handler_becomes_empty() {
    assert_eq!(text("<img src=x onerror=alert(1)>"), "");
}

#[test]
fn attributes_are_dropped() {
    assert_eq!(text(r#"<a href="javascript:x" title="t">link</a>"#), "link");
}

#[test]
fn br_becomes_a_line_break() {
    assert_eq!(text("a<br>b<br/>c</br>d"), "a\nb\nc\nd");
    assert_eq!(text("<br><br>"), "\n\n");
}

#[test]
fn block_boundaries_become_single_line_breaks() {
    assert_eq!(text("<p>a</p><p>b</p>"), "a\nb");
    assert_eq!(text("<p>a</p>\n\n  <p>b</p>"), "a\nb");
    assert_eq!(text("<ul><li>a</li><li>b</li></ul>"), "a\nb");
    assert_eq!(text("<div>a<div>b</div></div>c"), "a\nb\nc");
}

#[test]
fn block_breaks_never_lead_or_trail() {
    assert_eq!(text("<div><p>a</p></div>"), "a");
    assert_eq!(text("<p>  </p><p>a</p><p></p>"), "a");
}

#[test]
fn spaces_before_a_block_break_are_trimmed() {
    assert_eq!(text("a \t<p>b"), "a\nb");
}

#[test]
fn block_break_after_an_existing_line_break_is_not_doubled() {
    assert_eq!(text("a\n<p>b"), "a\nb");
    assert_eq!(text("a<br><p>b"), "a\nb");
}

#[test]
fn inline_whitespace_is_kept_as_written() {
    assert_eq!(text("a  b\n\n c\t"), "a  b\n\n c\t");
}

#[test]
fn carriage_returns_become_line_feeds() {
    assert_eq!(text("a\r\nb\rc"), "a\nb\nc");
    assert_eq!(text("a&#13;&#10;b"), "a\nb");
}

#[test]
fn controls_are_removed_but_tab_and_newline_kept() {
    assert_eq!(
        text("a\u{0}b\u{7}c\u{7F}d\u{85}e\u{9F}f\tg\nh"),
        "abcdef\tg\nh"
    );
}

#[test]
fn null_reference_becomes_replacement_character() {
    // The tokenizer maps `&#0;` to U+FFFD, as the HTML standard says.
    assert_eq!(text("a&#0;b"), "a\u{FFFD}b");
}

#[test]
fn clean_text_removes_every_listed_invisible_character() {
    let invisible = "\u{61C}\u{200E}\u{200F}\u{202A}\u{202B}\u{202C}\u{202D}\u{202E}\
                     \u{2066}\u{2067}\u{2068}\u{2069}\u{200B}\u{200C}\u{200D}\u{2060}\u{FEFF}";
    assert_eq!(clean_text(&format!("a{invisible}b")), "ab");
}

#[test]
fn clean_text_does_not_interpret_markup() {
    assert_eq!(clean_text("<b>&amp;</b>"), "<b>&amp;</b>");
}

#[test]
fn clean_text_composes_after_removing() {
    // Removing the zero-width space lets the accent compose with its base.
    assert_eq!(clean_text("e\u{200B}\u{301}"), "\u{e9}");
}

#[test]
fn is_clean_text_spots_each_kind_of_unclean_text() {
    assert!(is_clean_text("plain <b> & text\n\t"));
    assert!(!is_clean_text("a\r\nb"));
    assert!(!is_clean_text("a\u{200B}"));
    assert!(!is_clean_text("e\u{301}"));
}

#[test]
fn feeding_in_tiny_pieces_changes_nothing() {
    let html = "<p>h\u{e9}llo &amp;amp; <scr<script>x</script>ipt>w\u{1F600}rld</p>";
    assert_eq!(
        to_plain_text_in_pieces(html, 1),
        to_plain_text_in_pieces(html, FEED_PIECE)
    );
}

fn adversarial_inputs() -> Vec<(&'static str, String)> {
    let attributes: String = (0..800).map(|i| format!(" a{i}")).collect();
    vec![
        ("deep nesting", "<div><span><b>".repeat(273)),
        ("unclosed tags", "<a <b <i x=".repeat(372)),
        ("many entities", "&amp;".repeat(819)),
        ("many numeric references", "&#x1F600;".repeat(455)),
        ("unterminated references", "&#x".repeat(1365)),
        ("huge numeric references", "&#99999999999999;".repeat(240)),
        ("legacy references", "&notin&not".repeat(409)),
        ("unterminated comment", format!("<!--{}", "-".repeat(4092))),
        ("nested templates", "<template>".repeat(409)),
        ("many attributes", format!("<x{attributes}>")),
        (
            "escaped script",
            format!("<script>{}", "<!--<script>".repeat(340)),
        ),
        ("brackets", "<<<</</!<?".repeat(409)),
        ("line breaks", "<br>".repeat(1024)),
        ("blocks", "<p> </p>".repeat(512)),
    ]
}

#[test]
fn adversarial_4_kib_inputs_finish_quickly_with_clean_output() {
    let started = std::time::Instant::now();
    for (name, html) in adversarial_inputs() {
        assert!(html.len() <= 4096, "{name}: {} bytes", html.len());
        assert!(html.len() > 3800, "{name}: {} bytes", html.len());
        let out = text(&html);
        assert!(is_clean_text(&out), "{name}");
        assert!(out.len() <= 4 * html.len(), "{name}");
    }
    // A generous bound for a debug build on a loaded machine; typical is a few ms.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn adversarial_inputs_give_exact_outputs() {
    let outputs: Vec<(&str, String)> = adversarial_inputs()
        .into_iter()
        .map(|(name, html)| (name, text(&html)))
        .collect();
    let get = |name: &str| {
        outputs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, out)| out.clone())
            .expect("named input")
    };
    assert_eq!(get("deep nesting"), "");
    assert_eq!(get("unclosed tags"), "");
    assert_eq!(get("many entities"), "&".repeat(819));
    assert_eq!(get("many numeric references"), "\u{1F600}".repeat(455));
    assert_eq!(get("unterminated references"), "&#x".repeat(1365));
    assert_eq!(get("huge numeric references"), "\u{FFFD}".repeat(240));
    assert_eq!(get("legacy references"), "\u{AC}in\u{AC}".repeat(409));
    assert_eq!(get("unterminated comment"), "");
    assert_eq!(get("nested templates"), "");
    assert_eq!(get("many attributes"), "");
    assert_eq!(get("escaped script"), "");
    assert_eq!(get("line breaks"), "\n".repeat(1024));
    assert_eq!(get("blocks"), "");
}

/// HTML-ish strings: tags, references, raw-text elements, controls, invisible characters,
/// combining marks and arbitrary characters.
fn html_ish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-z <>&;#/!?=\"'-]{0,6}",
        "<[a-z/!?][a-z0-9]{0,6}>?",
        "&[a-zA-Z#x0-9]{0,7};?",
        Just("<script>".to_owned()),
        Just("</script>".to_owned()),
        Just("<style>".to_owned()),
        Just("<template>".to_owned()),
        Just("</template>".to_owned()),
        Just("<title>".to_owned()),
        Just("<br>".to_owned()),
        Just("<p>".to_owned()),
        Just("</div>".to_owned()),
        Just("<!--".to_owned()),
        Just("-->".to_owned()),
        Just("&amp;".to_owned()),
        Just("&amp;lt;".to_owned()),
        Just("&lt;".to_owned()),
        Just("&#x202E;".to_owned()),
        Just("&#13;".to_owned()),
        concat!(
            "[\u{0}-\u{1F}\u{7F}-\u{9F}\u{200B}-\u{200F}\u{202A}-\u{202E}",
            "\u{2066}-\u{2069}\u{FEFF}\r\n\t ]"
        ),
        "[aeiouAEIOU\u{300}-\u{36F}\u{1100}-\u{1112}\u{1161}-\u{1175}\u{11A8}-\u{11C2}]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn stored_text_is_a_fixed_point_of_clean_text(html in html_ish()) {
        let stored = to_plain_text(&html);
        prop_assert_eq!(clean_text(&stored), stored.clone());
        prop_assert!(is_clean_text(&stored));
    }

    #[test]
    fn clean_text_is_idempotent(text in any::<String>()) {
        let once = clean_text(&text);
        prop_assert_eq!(clean_text(&once), once.clone());
        prop_assert!(is_clean_text(&once));
    }

    #[test]
    fn clean_text_is_idempotent_on_invisible_heavy_text(html in html_ish()) {
        let once = clean_text(&html);
        prop_assert_eq!(clean_text(&once), once);
    }

    #[test]
    fn to_plain_text_is_idempotent_when_its_output_is_markup_inert(html in html_ish()) {
        let once = to_plain_text(&html);
        if is_markup_inert(&once) {
            prop_assert_eq!(to_plain_text(&once), once);
        }
    }

    #[test]
    fn to_plain_text_is_idempotent_on_arbitrary_strings_with_inert_output(
        s in any::<String>(),
    ) {
        let once = to_plain_text(&s);
        if is_markup_inert(&once) {
            prop_assert_eq!(to_plain_text(&once), once);
        }
    }

    #[test]
    fn markup_inert_plain_text_is_stored_as_clean_text(s in "[^<&]{0,64}") {
        prop_assert_eq!(to_plain_text(&s), clean_text(&s));
    }

    #[test]
    fn output_has_no_removed_character_and_is_nfc(html in html_ish()) {
        let out = to_plain_text(&html);
        prop_assert!(!out.chars().any(|c| c == '\r' || is_removed(c)));
        prop_assert!(unicode_normalization::is_nfc(&out));
    }

    #[test]
    fn piece_size_does_not_change_the_output(html in html_ish(), piece in 1usize..12) {
        prop_assert_eq!(to_plain_text_in_pieces(&html, piece), to_plain_text(&html));
    }
}
