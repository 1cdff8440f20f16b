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
mod tests;
