//! Hostile HTML through [`to_plain_text`]: exact outputs for a table of known attack shapes, and
//! property tests over generated HTML-ish strings.
//!
//! Every expected value below follows from the rules in the module docs of `src/text.rs`:
//! html5ever's tokenizer (no tree builder: no foreign content, so `<![CDATA[` is a bogus comment
//! everywhere), raw-text contents dropped, `title`/`textarea` kept as text, references decoded
//! once, block/`<br>` line breaks, then `clean_text` (CR/LF, removed controls and invisible
//! characters, NFC).
//!
//! The stored body is *text*, never HTML again (see the module docs). So a `<` followed by a
//! letter in the output is not a leak by itself: it is what the person wrote as text, spelled as
//! a reference (`&lt;b>`), inside `title`/`textarea`, or as a stray `<` that the tokenizer read
//! as text and that ends up next to a letter once what stood between them is removed
//! (`<<!---->b>`, `<\u{200B}b>`, `<\u{212A}>` → `<K>` by NFC). The table pins those cases too;
//! the "no element" property below states the exact inputs it covers.

use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use muster_antispam::{clean_text, to_plain_text};
use proptest::prelude::*;
use unicode_normalization::UnicodeNormalization;

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/// `(name, input, expected output)`.
fn hostile_cases() -> Vec<(&'static str, String, String)> {
    fn case(name: &'static str, input: impl Into<String>, expected: impl Into<String>) -> Case {
        (name, input.into(), expected.into())
    }
    type Case = (&'static str, String, String);

    vec![
        // --- Nested and malformed tags ---------------------------------------------------------
        case("misnested inline tags", "<b><i>x</b></i>", "x"),
        // `<` then `<`: the first is text; `<b>` is a tag; `>` is text.
        case("doubled angle brackets", "<<b>>", "<>"),
        // EOF inside a tag: the tag is dropped.
        case("unterminated start tag", "a<b", "a"),
        // EOF right after `</`: emitted as the characters `</`.
        case("lone end-tag opener", "a</", "a</"),
        // The single-quoted value runs to EOF, so the whole tag is dropped.
        case("unterminated quoted attribute", "<a href='x>y</a>", ""),
        case("unquoted attribute ends at gt", "<a href=x>y</a>", "y"),
        case("end tag with attributes", "a</b c=\"d\">e", "ae"),
        // The tag name is `b<i`.
        case("lt inside a tag name", "<b<i>x", "x"),
        case("empty end tag is ignored", "a</>b", "ab"),
        case("empty tag is text", "<>x", "<>x"),
        case("space after lt is text", "< b>", "< b>"),
        case(
            "comparison operators stay",
            "1 <3 <= 4 > 2",
            "1 <3 <= 4 > 2",
        ),
        case(
            "self-closing syntax changes nothing",
            "<div/>a<span/>b",
            "ab",
        ),
        case("processing instruction", "<?xml version=\"1.0\"?>x", "x"),
        // The doctype is bogus from `[` and ends at the first `>`.
        case(
            "doctype with internal subset",
            "<!DOCTYPE html [<!ENTITY x \"y\">]>z",
            "]>z",
        ),
        // The tag is named `scr<script`, so `ipt>alert(1)` is ordinary text.
        case(
            "script tag split by a nested tag",
            "<scr<script>ipt>alert(1)</script>",
            "ipt>alert(1)",
        ),
        // --- Script and URLs in attributes -----------------------------------------------------
        case(
            "script in an attribute",
            "<img alt=\"<script>alert(1)</script>\">ok",
            "ok",
        ),
        case(
            "end tag and script in a single-quoted attribute",
            "<a title='</a><script>alert(1)</script>'>x</a>",
            "x",
        ),
        case(
            "escaped script in an attribute",
            "<a title=\"&lt;script&gt;\">x</a>",
            "x",
        ),
        case(
            "javascript URL",
            "<a href=\"javascript:alert(1)\">click</a>",
            "click",
        ),
        case(
            "javascript URL with an encoded tab and an event handler",
            "<a href=\"jav&#x09;ascript:alert(1)\" onclick=\"alert(2)\">x</a >",
            "x",
        ),
        // --- Script elements ------------------------------------------------------------------
        case("uppercase script end tag", "<script>x</SCRIPT>ok", "ok"),
        case(
            "script end tag with a space",
            "<script>alert(1)</script >ok",
            "ok",
        ),
        case(
            "script with slash-separated attribute",
            "<script/src=//evil>alert(1)</script>ok",
            "ok",
        ),
        // Script data escaped / double escaped states: the first `</script>` closes the inner
        // `<script>` of the double-escaped section, the second one the element.
        case(
            "script data double escape",
            "<script><!--<script></script>alert(1)</script>ok",
            "ok",
        ),
        case(
            "script inside template",
            "<template><script>alert(1)</script></template>ok",
            "ok",
        ),
        case(
            "xmp hides markup",
            "<xmp><script>alert(1)</script></xmp>ok",
            "ok",
        ),
        case(
            "everything after plaintext is dropped",
            "a<plaintext></plaintext><b>b",
            "a",
        ),
        // --- Entities: decoded exactly once ----------------------------------------------------
        case(
            "escaped script becomes literal text",
            "&lt;script&gt;alert(1)&lt;/script&gt;",
            "<script>alert(1)</script>",
        ),
        case("double-encoded lt", "&amp;lt;", "&lt;"),
        case("double-encoded amp", "&amp;amp;", "&amp;"),
        case(
            "double-encoded script stays encoded once",
            "&amp;lt;script&amp;gt;",
            "&lt;script&gt;",
        ),
        case(
            "legacy references without semicolon",
            "&ltscript&gt",
            "<script>",
        ),
        case("uppercase references", "&LT;&GT;&AMP;&QUOT;", "<>&\""),
        case("decimal lt", "&#60;", "<"),
        case("hex lt", "&#x3C;", "<"),
        case("hex lt with leading zeros", "&#x0000003C;", "<"),
        case("decimal lt without semicolon", "&#60", "<"),
        case("null reference", "&#0;", "\u{FFFD}"),
        case("reference beyond Unicode", "&#x110000;", "\u{FFFD}"),
        case("surrogate reference", "&#xD800;", "\u{FFFD}"),
        // C1 references are remapped through windows-1252 where it has a character...
        case(
            "C1 reference 0x80 is the euro sign",
            "a&#x80;b",
            "a\u{20AC}b",
        ),
        case("C1 reference 0x85 is an ellipsis", "a&#x85;b", "a\u{2026}b"),
        case(
            "C1 reference 0x9F is Y with diaeresis",
            "a&#x9F;b",
            "a\u{178}b",
        ),
        // ...and stay controls (then removed) where it has none.
        case("C1 reference 0x81 is removed", "a&#x81;b", "ab"),
        case("DEL reference is removed", "a&#127;b", "ab"),
        case("BEL reference is removed", "a&#7;b", "ab"),
        case("tab reference is kept", "a&#9;b", "a\tb"),
        case("bidi isolate reference is removed", "a&#x2066;b", "ab"),
        case(
            "zero-width references are removed",
            "a&zwj;&zwnj;&ZeroWidthSpace;&NoBreak;b",
            "ab",
        ),
        case("emoji reference", "&#x1F600;", "\u{1F600}"),
        case(
            "nvlt is lt with a vertical line overlay",
            "&nvlt;b",
            "<\u{20D2}b",
        ),
        // --- Comments -------------------------------------------------------------------------
        case("comment", "a<!-- c -->b", "ab"),
        case("unterminated comment", "a<!-- b", "a"),
        case("abruptly closed empty comment", "a<!-->b", "ab"),
        case("abruptly closed comment with one dash", "a<!--->b", "ab"),
        case("comment closed by --!>", "a<!-- x --!>b", "ab"),
        case("comment with double dash inside", "<!--a--b-->c", "c"),
        // Comments do not nest: the first `-->` closes.
        case("nested comment", "a<!-- <!-- x --> -->b", "a -->b"),
        case(
            "conditional comment",
            "<!--[if IE]><script>alert(1)</script><![endif]-->ok",
            "ok",
        ),
        case(
            "downlevel-revealed conditional comment",
            "<![if !IE]>x<![endif]>",
            "x",
        ),
        // --- CDATA: a bogus comment up to the first `>` ----------------------------------------
        case("CDATA section", "a<![CDATA[x]]>b", "ab"),
        case("CDATA section with gt inside", "<![CDATA[a>b]]>", "b]]>"),
        // `<![CDATA[<script` is the comment; `</script>` is a stray end tag.
        case(
            "CDATA script in svg",
            "<svg><![CDATA[<script>alert(1)</script>]]></svg>",
            "alert(1)]]>",
        ),
        // --- SVG and MathML -------------------------------------------------------------------
        case("svg script", "<svg><script>alert(1)</script></svg>", ""),
        case("svg onload", "<svg onload=alert(1)>", ""),
        case("math text is kept", "<math><mi>x</mi></math>", "x"),
        case(
            "svg style and text",
            "<svg><style>*{}</style><text>t</text></svg>",
            "t",
        ),
        case(
            "math mglyph style mutation",
            "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
            "",
        ),
        // The style element ends at the `</style>` inside the attribute value.
        case(
            "svg style mutation",
            "<svg></p><style><a id=\"</style><img src=1 onerror=alert(1)>\">",
            "\">",
        ),
        // --- Other raw-text elements ----------------------------------------------------------
        case(
            "style with javascript URL",
            "<style>body{background:url(javascript:alert(1))}</style>x",
            "x",
        ),
        case(
            "noscript mutation",
            "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">",
            "\">",
        ),
        case(
            "iframe srcdoc",
            "<iframe srcdoc=\"<script>alert(1)</script>\">x</iframe>y",
            "y",
        ),
        case(
            "iframe srcdoc with references",
            "<iframe srcdoc=\"&lt;script&gt;alert(1)&lt;/script&gt;\"></iframe>",
            "",
        ),
        case(
            "style self-closing syntax",
            "<style/><b>x</b></style>y",
            "y",
        ),
        // --- RCDATA: title and textarea text is kept, markup inside is text ---------------------
        case(
            "script inside textarea is text",
            "<textarea><script>alert(1)</script></textarea>",
            "<script>alert(1)</script>",
        ),
        case(
            "references inside title are decoded once",
            "<title>&lt;b&gt; &amp;amp;</title>",
            "<b> &amp;",
        ),
        case(
            "script after an empty textarea is dropped",
            "<textarea></textarea><script>alert(1)</script>ok",
            "ok",
        ),
        case(
            "textarea end tag with a space",
            "<TEXTAREA>a</textarea >b",
            "ab",
        ),
        case(
            "title ends only at its own end tag",
            "<title>a</titlex>b</title>c",
            "a</titlex>bc",
        ),
        case("unterminated textarea", "<textarea>x<b>", "x<b>"),
        case(
            "null inside textarea is a replacement character",
            "<textarea>a\u{0}b</textarea>",
            "a\u{FFFD}b",
        ),
        // --- Bidi controls ----------------------------------------------------------------------
        case("right-to-left override", "a\u{202E}b", "ab"),
        case(
            "bidi isolates",
            "\u{2066}a\u{2067}b\u{2068}c\u{2069}",
            "abc",
        ),
        case(
            "bidi marks and embeddings",
            "\u{200E}\u{200F}\u{61C}\u{202A}\u{202B}\u{202C}\u{202D}x",
            "x",
        ),
        case("bidi override inside a tag name", "<b\u{202E}>x</b>", "x"),
        // --- Zero-width characters --------------------------------------------------------------
        case(
            "zero-width characters",
            "a\u{200B}b\u{200C}c\u{200D}d\u{2060}e\u{FEFF}f",
            "abcdef",
        ),
        case("byte order mark", "\u{FEFF}x", "x"),
        // The joiner goes, so the family emoji falls apart into its members.
        case(
            "zero-width joiner emoji sequence",
            "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}",
            "\u{1F468}\u{1F469}\u{1F467}",
        ),
        // --- Controls -----------------------------------------------------------------------------
        // A NUL in text is a separate token, which the sink drops.
        case("NUL in text", "a\u{0}b", "ab"),
        case("BEL and ESC", "a\u{7}b\u{1B}[31mc", "ab[31mc"),
        case("NEL", "a\u{85}b", "ab"),
        case("C1 controls", "\u{80}a\u{9F}", "a"),
        case("NUL inside a tag name", "<b\u{0}>x", "x"),
        // --- CR and LF ------------------------------------------------------------------------
        case("CR LF, CR, LF CR", "a\r\nb\rc\n\rd", "a\nb\nc\n\nd"),
        case(
            "CR LF around block elements",
            "<p>a\r\n</p>\r\n<p>b</p>",
            "a\nb",
        ),
        case("CR reference before a raw LF", "a&#13;\nb", "a\nb"),
        case(
            "line breaks are not collapsed",
            "a<br>\r\n<br>b",
            "a\n\n\nb",
        ),
        // --- Big inputs -------------------------------------------------------------------------
        case("4 KiB of lt", "<".repeat(4096), "<".repeat(4096)),
        case("4 KiB of amp", "&".repeat(4096), "&".repeat(4096)),
        case("1024 escaped lt", "&lt;".repeat(1024), "<".repeat(1024)),
        case(
            "div nested 1000 deep",
            format!("{}x{}", "<div>".repeat(1000), "</div>".repeat(1000)),
            "x",
        ),
        case(
            "div nested 1000 deep with text at each level",
            "<div>a".repeat(1000),
            vec!["a"; 1000].join("\n"),
        ),
        case(
            "1000 unclosed bold tags",
            format!("{}x", "<b>".repeat(1000)),
            "x",
        ),
        // --- Unicode ----------------------------------------------------------------------------
        case(
            "emoji and flags are kept",
            "\u{1F600} \u{1F1EB}\u{1F1F7}",
            "\u{1F600} \u{1F1EB}\u{1F1F7}",
        ),
        case("combining acute composes", "e\u{301}", "\u{E9}"),
        case("ring above composes", "A\u{30A}", "\u{C5}"),
        case("angstrom sign is a singleton", "\u{212B}", "\u{C5}"),
        case(
            "combining marks are reordered then composed",
            "a\u{302}\u{323}",
            "\u{1EAD}",
        ),
        case(
            "hangul jamo compose",
            "\u{1100}\u{1161}\u{11A8}",
            "\u{AC01}",
        ),
        case(
            "accent composes across a removed tag",
            "e<b>\u{301}</b>",
            "\u{E9}",
        ),
        case(
            "accent composes across a removed zero-width space",
            "e\u{200B}\u{301}",
            "\u{E9}",
        ),
        case(
            "decoded lt composes with a long solidus",
            "&lt;\u{338}",
            "\u{226E}",
        ),
        // NFC can make text longer: composition exclusions decompose.
        case(
            "musical symbol expands to three characters",
            "\u{1D160}",
            "\u{1D158}\u{1D165}\u{1D16E}",
        ),
        case(
            "greek dialytika tonos expands to two characters",
            "\u{344}",
            "\u{308}\u{301}",
        ),
        // --- A text `<` next to removed material: markup-looking TEXT re-forms -----------------
        // (By design, like `&lt;b>`: the stored body is text. See the module docs.)
        case("lt and letter around a comment", "<<!---->b>", "<b>"),
        case("lt and letter around an end tag", "<</i>b>", "<b>"),
        case("lt and letter around a NUL", "<\u{0}b>", "<b>"),
        case(
            "lt and letter around zero-width spaces",
            "<\u{200B}script>alert(1)<\u{200B}/script>",
            "<script>alert(1)</script>",
        ),
        case("Kelvin sign after lt becomes K", "<\u{212A}>", "<K>"),
    ]
}

#[test]
fn hostile_inputs_become_the_expected_plain_text() {
    let cases = hostile_cases();
    assert!(cases.len() >= 45, "only {} cases", cases.len());
    let mut names: Vec<&str> = cases.iter().map(|(name, _, _)| *name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");

    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(name, input, expected)| {
            let actual = to_plain_text(input);
            (actual != *expected).then(|| {
                format!(
                    "{name}:\n    input    {:?}\n    expected {:?}\n    actual   {:?}",
                    shorten(input),
                    shorten(expected),
                    shorten(&actual),
                )
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Long strings in failure messages: the first 80 characters and the length.
fn shorten(s: &str) -> String {
    let count = s.chars().count();
    if count <= 80 {
        s.to_owned()
    } else {
        format!(
            "{}… ({count} chars)",
            s.chars().take(80).collect::<String>()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// html5ever over the output
// ---------------------------------------------------------------------------------------------

/// Collects the names of the start tags html5ever's tokenizer finds.
#[derive(Default)]
struct StartTags(RefCell<Vec<String>>);

impl TokenSink for StartTags {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        match token {
            Token::TagToken(tag) if tag.kind == TagKind::StartTag => {
                self.0.borrow_mut().push(tag.name.to_string());
            }
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// The start tags html5ever's tokenizer finds in `text`, read as HTML from the data state.
///
/// The sink never switches the tokenizer to a raw-text state: that would only happen after a
/// start tag, and any start tag is already a finding.
fn start_tags_in(text: &str) -> Vec<String> {
    let queue = BufferQueue::default();
    queue.push_back(StrTendril::from_slice(text));
    let tokenizer = Tokenizer::new(StartTags::default(), TokenizerOpts::default());
    let _ = tokenizer.feed(&queue);
    tokenizer.end();
    tokenizer.sink.0.take()
}

#[test]
fn the_start_tag_detector_sees_start_tags() {
    assert_eq!(start_tags_in("a<b>c</b><svg/>"), ["b", "svg"]);
    assert!(start_tags_in("a < b <3 </ <!-- x --> &lt;i&gt;").is_empty());
    // EOF inside a tag: no token, although `<` is followed by a letter.
    assert!(start_tags_in("<b").is_empty());
    // The table's re-formed markup is seen.
    assert_eq!(start_tags_in(&to_plain_text("<\u{212A}>")), ["k"]);
}

/// Whether a `<` in `text` is immediately followed by an ASCII letter.
fn has_lt_letter(text: &str) -> bool {
    text.as_bytes()
        .windows(2)
        .any(|w| w[0] == b'<' && w[1].is_ascii_alphabetic())
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/// Characters worth throwing at the converter: C0/C1 controls, bidi controls, zero-width
/// characters, CR/LF/tab, combining marks, characters whose NFC differs (singletons,
/// composition exclusions), Hangul jamo.
const AWKWARD_CHARS: &str = concat!(
    "[\u{0}-\u{1F}\u{7F}-\u{9F}\u{61C}\u{200B}-\u{200F}\u{202A}-\u{202E}\u{2060}",
    "\u{2066}-\u{2069}\u{FEFF}\r\n\t \u{300}-\u{36F}\u{344}\u{338}\u{212A}\u{212B}",
    "\u{1D160}\u{FB2C}\u{958}\u{1100}\u{1161}\u{11A8}\u{E9}\u{1F600}]"
);

/// Any one character except `<` and `&`.
fn char_but_lt_amp() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 \"'=/!?>;#()-]",
        3 => AWKWARD_CHARS,
        1 => any::<char>().prop_filter("not < or &", |c| !matches!(c, '<' | '&')).prop_map(String::from),
    ]
}

/// Text in which every `<` is followed by one of `` \t\r\n0-9=>(-`` and every `&` by a space,
/// `;` or `-`: the tokenizer reads each of them as text, and the character after it is one
/// that neither the tokenizer, nor the extractor, nor `clean_text` removes or turns into a
/// letter.
fn inert_text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        6 => char_but_lt_amp(),
        1 => "<[ \t\r\n0-9=>(-]",
        1 => "&[ ;-]",
    ];
    prop::collection::vec(atom, 0..8).prop_map(|atoms| atoms.concat())
}

/// Arbitrary text, `<` and `&` anywhere.
fn any_text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        6 => char_but_lt_amp(),
        1 => Just("<".to_owned()),
        1 => Just("&".to_owned()),
        1 => "[a-z]{1,4}",
    ];
    prop::collection::vec(atom, 0..8).prop_map(|atoms| atoms.concat())
}

/// Tag names other than the RCDATA ones (`title`, `textarea`), whose contents are text.
const NON_RCDATA_TAGS: &[&str] = &[
    "script",
    "SCRIPT",
    "style",
    "svg",
    "math",
    "mi",
    "template",
    "plaintext",
    "iframe",
    "noscript",
    "noembed",
    "noframes",
    "xmp",
    "b",
    "i",
    "a",
    "img",
    "div",
    "p",
    "br",
    "li",
    "table",
    "foreignObject",
];

/// Attribute values that hold markup, references or URLs. No reference decodes to `<`, and no
/// `<` is followed by anything but an ASCII letter or `/`.
const HOSTILE_VALUES: &[&str] = &[
    "<script>alert(1)</script>",
    "</style><img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "&quot;><b>x",
    "</noscript><p>",
    "--><svg onload=alert(1)>",
];

/// ` name`, ` name=value`, ` name="value"`, ` name='value'`, or a quoted value left open (it
/// swallows what follows up to the next matching quote).
fn attribute(value: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    (
        "[a-z]{1,6}",
        prop_oneof![
            Just(""),
            Just("="),
            Just("=\""),
            Just("='"),
            Just("=\"\""),
            Just("=''"),
        ],
        value,
        prop_oneof![Just(""), Just("\""), Just("'")],
    )
        .prop_map(|(name, open, value, close)| {
            if open.is_empty() {
                format!(" {name}")
            } else {
                format!(" {name}{open}{value}{close}")
            }
        })
}

/// Start, end and self-closing tags with up to three attributes.
fn tag(names: Vec<&'static str>, value: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    (
        prop::sample::select(names),
        prop::collection::vec(attribute(value), 0..3),
        prop_oneof![Just(("<", ">")), Just(("</", ">")), Just(("<", "/>"))],
    )
        .prop_map(|(name, attributes, (open, close))| {
            format!("{open}{name}{}{close}", attributes.concat())
        })
}

/// Comments of every shape, CDATA, processing instructions, doctypes and bogus comments, around
/// `text`.
fn comment_like(text: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just(("<!--", "-->")),
            Just(("<!--", "--!>")),
            Just(("<!--", "")),
            Just(("<!-->", "")),
            Just(("<!--->", "")),
            Just(("<!--[if IE]>", "<![endif]-->")),
            Just(("<![CDATA[", "]]>")),
            Just(("<?", ">")),
            Just(("<!DOCTYPE ", ">")),
            Just(("<!x", ">")),
        ],
        text,
    )
        .prop_map(|((open, close), text)| format!("{open}{text}{close}"))
}

/// References that never decode to a `<` that could stand next to a letter, alone or joined with
/// the piece after them: numeric references always end in `;` and are not 60, no random named
/// one starts with `l`/`L`, and the one listed named reference that does give `<`, `&nvlt;`,
/// gives it followed by U+20D2, which stays in the output.
fn reference_without_lt() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "&amp;",
            "&amp;lt;",
            "&amp;amp;",
            "&gt;",
            "&quot;",
            "&nbsp",
            "&nbsp;",
            "&notit;",
            "&#x202E;",
            "&#8203;",
            "&#0;",
            "&#x110000;",
            "&#13;",
            "&#x85;",
            "&#x9F;",
            "&#xD800;",
            "&#x1D160;",
            "&#x344;",
            "&#97;",
            "&#x3E;",
            "&zwj;",
            "&zz;",
            "&#;",
            "&#x;",
            "&nvlt;",
        ])
        .prop_map(str::to_owned),
        "&[a-km-zA-KM-Z][a-zA-Z0-9]{0,6};?",
        "&#[0-9]{1,7};".prop_filter("not <", |r| numeric_value(r) != Some(0x3C)),
        "&#[xX][0-9a-fA-F]{1,6};".prop_filter("not <", |r| numeric_value(r) != Some(0x3C)),
    ]
}

/// Any reference, including ones for `<`.
fn any_reference() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => reference_without_lt(),
        1 => prop::sample::select(vec!["&lt;", "&LT", "&lt", "&#60;", "&#x3c;", "&#0060"])
            .prop_map(str::to_owned),
        1 => "&[a-zA-Z#x0-9]{0,7};?",
    ]
}

/// The value of `&#…;` / `&#x…;`.
fn numeric_value(reference: &str) -> Option<u32> {
    let digits = reference.strip_prefix("&#")?.trim_end_matches(';');
    match digits.strip_prefix(['x', 'X']) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => digits.parse().ok(),
    }
}

/// HTML-ish strings with nothing held back: any tag (RCDATA ones too) with any attribute value,
/// any reference, stray `<` and `&` anywhere, every kind of comment, awkward characters.
fn hostile_html() -> impl Strategy<Value = String> {
    let mut names = NON_RCDATA_TAGS.to_vec();
    names.extend(["title", "textarea", "TEXTAREA"]);
    let value = prop_oneof![
        any_text(),
        prop::sample::select(HOSTILE_VALUES.to_vec()).prop_map(str::to_owned),
        Just("&lt;script&gt;".to_owned()),
    ]
    .boxed();
    let piece = prop_oneof![
        4 => any_text(),
        3 => tag(names, value),
        2 => any_reference(),
        1 => comment_like(any_text().boxed()),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// HTML-ish strings built so that, in every tokenizer state that keeps text, no `<` can end
/// up next to a letter in the output:
///
/// * a `<` is followed by an ASCII letter, `/`, `!` or `?` (a tag, end tag, comment or bogus
///   comment, read as markup in the data state) or by one of `` \t\r\n0-9=>(-`` (read as
///   text, and followed by a character that stays in the output);
/// * a `&` starts a reference that gives no `<` (except `&nvlt;`: `<` and U+20D2, which stays;
///   see [`reference_without_lt`]) or is followed by a space, `;` or `-`;
/// * `title` and `textarea` (RCDATA: markup inside is text) appear only as whole elements
///   around [`inert_text`] and references, never as free-standing start tags.
///
/// Everything else is free: every other tag incl. `script`, `style`, `svg`, `math`, `template`,
/// `plaintext`, `iframe`, `noscript`; attributes with quotes left open, holding markup;
/// comments (unterminated, `<!-->`, `<!--->`, conditional), CDATA, processing instructions,
/// doctypes; controls, bidi and zero-width characters, combining marks.
fn html_without_text_markup() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        inert_text(),
        prop::sample::select(HOSTILE_VALUES.to_vec()).prop_map(str::to_owned),
    ]
    .boxed();
    let rcdata_content = prop::collection::vec(
        prop_oneof![3 => inert_text(), 1 => reference_without_lt()],
        0..4,
    )
    .prop_map(|pieces| pieces.concat());
    let rcdata = (
        prop_oneof![
            Just(("<title>", "</title>")),
            Just(("<textarea>", "</textarea>")),
            Just(("<TEXTAREA name=t>", "</textarea >")),
        ],
        rcdata_content,
    )
        .prop_map(|((open, close), content)| format!("{open}{content}{close}"));
    let piece = prop_oneof![
        4 => inert_text(),
        3 => tag(NON_RCDATA_TAGS.to_vec(), value),
        2 => reference_without_lt(),
        1 => comment_like(inert_text().boxed()),
        1 => rcdata,
        1 => prop::sample::select(vec!["</title>", "</textarea>"]).prop_map(str::to_owned),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    /// Asserted: `chars(to_plain_text(x)) <= chars(NFD(x))` for every generated `x`. For an `x`
    /// with no decomposable character (NFD(x) has as many characters as x) that is exactly
    /// "the output has at most as many characters as the input".
    ///
    /// Why NFD(x) and not x: NFC can lengthen text. Composition exclusions and non-starter
    /// decompositions expand (`U+1D160` → 3 characters, `U+0344` → 2; NFC's maximum is ×3), so
    /// `chars(out) <= chars(x)` is false (see the table). The bound holds because
    /// `chars(NFC(t)) <= chars(NFD(t))` for the text `t` before normalisation, and
    /// `chars(NFD(t))` is the sum of the characters' decomposition lengths, where each
    /// character of `t` is either a copy of a distinct input character (CR LF gives one LF), a
    /// line break standing for a whole tag (at least 3 characters), or one of the at most two
    /// characters a reference of at least 3 characters decodes to (a character's NFD is at most
    /// 4 long, and a reference decoding to a character with a longer NFD is itself longer).
    #[test]
    fn output_is_never_longer_than_the_input(html in hostile_html()) {
        let out = to_plain_text(&html);
        let out_chars = out.chars().count();
        let bound = html.nfd().count();
        prop_assert!(
            out_chars <= bound,
            "{} output chars > {} NFD input chars: {:?} -> {:?}", out_chars, bound, html, out
        );
    }

    /// Asserted, for every `x` from [`html_without_text_markup`] (its doc lists the rules that
    /// generator keeps): html5ever's tokenizer, run over `to_plain_text(x)` from the data state,
    /// produces no start tag token; and the output has no `<` directly followed by an ASCII
    /// letter at all (stricter: it also rules out `<b` at the very end, which the tokenizer
    /// drops as EOF-in-tag).
    ///
    /// Not asserted for arbitrary input, because it is false there, by design: the output is
    /// text, and text may legitimately read as markup. Every `<` in the output is a `<` the
    /// tokenizer read as *text*; tags in the input never survive. A text `<` comes from a
    /// reference (`&lt;b>` → `<b>`), from `title`/`textarea` contents, or from a stray `<` not
    /// followed by a letter (`<<!---->b>`, `<\u{200B}b>`, `<\u{212A}>` → `<K>`), and the
    /// generator rules out exactly those three.
    #[test]
    fn output_never_contains_an_element_html5ever_would_parse(
        html in html_without_text_markup(),
    ) {
        let out = to_plain_text(&html);
        let tags = start_tags_in(&out);
        prop_assert!(tags.is_empty(), "start tags {:?} in {:?} from {:?}", tags, out, html);
        prop_assert!(!has_lt_letter(&out), "< and a letter in {:?} from {:?}", out, html);
        // The output is stored text, so re-stripping it (with `clean_text`) keeps it as it is.
        prop_assert_eq!(clean_text(&out), out);
    }
}
