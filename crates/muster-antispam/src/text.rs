//! Layer 4, the body: HTML in, plain text out.
//!
//! An edit's `body` arrives as a string that may hold HTML. [`to_plain_text`] turns it into the
//! plain text that is stored. It uses html5ever's spec-conformant tokenizer (no DOM, no tree
//! builder), then [`clean_text`].
//!
//! # What [`to_plain_text`] does
//!
//! 1. **Tokenize** as HTML. Tags, attributes, comments, doctypes, CDATA sections and processing
//!    instructions are removed; text is kept. Character references are decoded by the
//!    tokenizer, once: `a &amp; b` → `a & b`, `&amp;lt;` → `&lt;` (literally).
//! 2. **Drop raw-text contents.** The contents of `script` (script data), `style`, `xmp`,
//!    `iframe`, `noembed`, `noframes` and `noscript` (raw text, as a browser with scripting
//!    enabled parses them) are dropped up to the element's end tag. The contents of `template`
//!    are dropped up to the matching `</template>` (templates nest). `plaintext` has no end
//!    tag: everything after `<plaintext>` is dropped. `title` and `textarea` are RCDATA: their
//!    text is kept (with references decoded) and markup inside them is text. Text inside any
//!    other element, including `svg` and `math`, is kept.
//! 3. **Line breaks.** `<br>` (and `</br>`, which browsers read as `<br>`) becomes `"\n"`. A
//!    start or end tag of a block element (`p`, `div`, `li`, `h1`…`h6`, `tr`, `td`, …; the
//!    list is `BLOCK_ELEMENTS` in the source) asks for a line break before the next visible
//!    text: the break is written only if the output so far is non-empty and does not already
//!    end in a line break, trailing spaces and tabs before it are removed, and HTML whitespace
//!    between the block boundary and that text is dropped. So `<p>a</p>\n<p>b</p>` → `a\nb`,
//!    and breaks never lead, trail or double. Other whitespace is kept as written (no
//!    collapsing), so plain text with its own line breaks survives unchanged.
//! 4. [`clean_text`] the result.
//!
//! # What [`clean_text`] does
//!
//! 1. `\r\n` and lone `\r` become `\n`.
//! 2. Removed: every control character (Unicode category Cc: C0 `U+0000`–`U+001F`, `U+007F`,
//!    C1 `U+0080`–`U+009F`) except `\t` and `\n`; the bidirectional controls `U+061C`,
//!    `U+200E`, `U+200F`, `U+202A`–`U+202E`, `U+2066`–`U+2069`; the zero-width characters
//!    `U+200B`, `U+200C`, `U+200D`, `U+2060`, `U+FEFF`.
//! 3. NFC normalisation.
//!
//! [`clean_text`] is idempotent: after step 1 there is no `\r`; NFC creates neither `\r` nor a
//! removed character (no canonical decomposition contains one), so step 2 is then a no-op; and
//! NFC is idempotent. [`is_clean_text`] tells whether a string is already its own clean form.
//!
//! # "Entities decoded exactly once" and "stripping again changes nothing"
//!
//! The contract asks for both. Taken literally as `to_plain_text(to_plain_text(x)) ==
//! to_plain_text(x)` for every `x`, they contradict each other, whatever the implementation:
//! `to_plain_text("&amp;lt;")` must be `&lt;` (decoded once), and `to_plain_text("&lt;")` must
//! be `<` (an entity in the input is decoded), so applying it twice to `&amp;lt;` gives `<`.
//! Any output that contains `&` or `<` — which the first requirement forces — is, read as
//! HTML again, a different document. The only ways out would give up a requirement: decoding
//! repeatedly until nothing changes (decodes more than once), escaping the output (it would be
//! HTML, not text, and `a &amp; b` would not become `a & b`), or replacing `<`/`&` by look-alikes
//! (changes what the person wrote).
//!
//! So the design separates the two kinds of string the contract talks about:
//!
//! * the **request body is HTML**, and is converted to text once, by [`to_plain_text`];
//! * the **stored body is text**, never HTML again. "Stripping" text is [`clean_text`], and the
//!   stored text is a fixed point of it: `clean_text(to_plain_text(x)) == to_plain_text(x)` for
//!   every `x` (proved by the property tests). Anything that re-checks stored text must use
//!   [`clean_text`] / [`is_clean_text`], and anything that shows it must escape it as text.
//!
//! Moreover, for every output that holds no markup-significant sequence — no `<` followed by
//! an ASCII letter, `/`, `!` or `?`, and no `&` followed by an ASCII letter or digit or `#` —
//! `to_plain_text` itself is idempotent (also a property test): the tokenizer passes such text
//! through unchanged, and it is already clean. In particular every output without `<` or `&`,
//! and every plain-text body without them, is stored exactly as [`clean_text`] leaves it.
//!
//! # Cost
//!
//! No input panics. Time is linear in the input, with one exception inside html5ever: a
//! tag's attribute names are checked for duplicates pairwise, quadratic in the number of
//! attributes on *one* tag. At the contract's 4096-byte request limit that is at most about
//! a million integer comparisons; callers apply that limit before calling (see
//! [`crate::check_request_size`]). Input is fed to the tokenizer in 64 KiB pieces, so no
//! length limit of html5ever's buffers is reached.

use std::cell::RefCell;

use html5ever::TokenizerResult;
use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use unicode_normalization::UnicodeNormalization;

/// Elements whose start and end tags ask for a line break.
const BLOCK_ELEMENTS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "legend",
    "li",
    "listing",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "tr",
    "ul",
];

/// Size of the pieces the input is fed to the tokenizer in.
const FEED_PIECE: usize = 64 * 1024;

/// Converts an HTML body to the plain text that is stored (see the module docs).
#[must_use]
pub fn to_plain_text(html: &str) -> String {
    to_plain_text_in_pieces(html, FEED_PIECE)
}

fn to_plain_text_in_pieces(html: &str, piece: usize) -> String {
    clean_text(&extract(html, piece))
}

/// Normalises text that is already plain (see the module docs). Idempotent.
#[must_use]
pub fn clean_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            chars.next_if_eq(&'\n');
            out.push('\n');
        } else if !is_removed(c) {
            out.push(c);
        }
    }
    out.nfc().collect()
}

/// Whether `text` is its own [`clean_text`]: no `\r`, no removed character, and NFC.
#[must_use]
pub fn is_clean_text(text: &str) -> bool {
    !text.chars().any(|c| c == '\r' || is_removed(c)) && unicode_normalization::is_nfc(text)
}

/// Characters [`clean_text`] removes (`\r` is handled separately: it becomes `\n`).
fn is_removed(c: char) -> bool {
    match c {
        '\t' | '\n' | '\r' => false,
        '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}' => true,
        '\u{061C}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}' => true,
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' => true,
        _ => false,
    }
}

/// HTML whitespace that may survive [`is_removed`].
fn is_html_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Runs the tokenizer over `html`, fed in pieces of at most `piece` bytes (on char boundaries).
fn extract(html: &str, piece: usize) -> String {
    let queue = BufferQueue::default();
    let mut rest = html;
    while !rest.is_empty() {
        let mut end = piece.clamp(1, rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (head, tail) = rest.split_at(end);
        queue.push_back(StrTendril::from_slice(head));
        rest = tail;
    }
    let tokenizer = Tokenizer::new(Sink::default(), TokenizerOpts::default());
    // The sink never asks for a script pause or an encoding change, so `feed` runs to the end
    // of the queue and returns `Done`; each other result would still be progress.
    while !matches!(tokenizer.feed(&queue), TokenizerResult::Done) {}
    tokenizer.end();
    tokenizer.sink.0.take().out
}

#[derive(Default)]
struct Sink(RefCell<Extractor>);

impl TokenSink for Sink {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        let mut extractor = self.0.borrow_mut();
        match token {
            Token::TagToken(tag) => extractor.tag(&tag),
            Token::CharacterTokens(text) => {
                extractor.text(&text);
                TokenSinkResult::Continue
            }
            Token::NullCharacterToken
            | Token::CommentToken(_)
            | Token::DoctypeToken(_)
            | Token::EOFToken
            | Token::ParseError(_) => TokenSinkResult::Continue,
        }
    }
}

#[derive(Default)]
struct Extractor {
    out: String,
    /// Inside a raw-text element whose contents are dropped, until its end tag.
    in_dropped_raw: bool,
    /// After `<plaintext>`: everything is dropped.
    in_plaintext: bool,
    /// Open `<template>` elements.
    template_depth: usize,
    /// A block boundary was seen; a line break is owed before the next visible text.
    break_pending: bool,
}

impl Extractor {
    fn dropping(&self) -> bool {
        self.in_dropped_raw || self.in_plaintext || self.template_depth > 0
    }

    fn tag(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        match tag.kind {
            TagKind::StartTag => match name {
                "script" => return self.drop_raw(RawKind::ScriptData),
                "style" | "xmp" | "iframe" | "noembed" | "noframes" | "noscript" => {
                    return self.drop_raw(RawKind::Rawtext);
                }
                "title" | "textarea" => return TokenSinkResult::RawData(RawKind::Rcdata),
                "plaintext" => {
                    self.in_plaintext = true;
                    return TokenSinkResult::Plaintext;
                }
                "template" => self.template_depth = self.template_depth.saturating_add(1),
                "br" => self.hard_break(),
                _ if BLOCK_ELEMENTS.contains(&name) => self.soft_break(),
                _ => {}
            },
            TagKind::EndTag => {
                if self.in_dropped_raw {
                    // In a raw-text state the tokenizer emits no tag but the element's own
                    // end tag.
                    self.in_dropped_raw = false;
                    return TokenSinkResult::Continue;
                }
                match name {
                    "template" => self.template_depth = self.template_depth.saturating_sub(1),
                    "br" => self.hard_break(),
                    _ if BLOCK_ELEMENTS.contains(&name) => self.soft_break(),
                    _ => {}
                }
            }
        }
        TokenSinkResult::Continue
    }

    fn drop_raw(&mut self, kind: RawKind) -> TokenSinkResult<()> {
        self.in_dropped_raw = true;
        TokenSinkResult::RawData(kind)
    }

    fn hard_break(&mut self) {
        if !self.dropping() {
            self.break_pending = false;
            self.out.push('\n');
        }
    }

    fn soft_break(&mut self) {
        if !self.dropping() {
            self.break_pending = true;
        }
    }

    fn text(&mut self, text: &str) {
        if self.dropping() {
            return;
        }
        for c in text.chars() {
            if is_removed(c) {
                continue;
            }
            if self.break_pending {
                if is_html_space(c) {
                    continue;
                }
                self.write_break();
            }
            self.out.push(c);
        }
    }

    fn write_break(&mut self) {
        self.break_pending = false;
        let kept = self.out.trim_end_matches([' ', '\t']).len();
        self.out.truncate(kept);
        if !self.out.is_empty() && !self.out.ends_with(['\n', '\r']) {
            self.out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
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
}
