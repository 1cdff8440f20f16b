//! Layer 2: the honeypot field.
//!
//! The edit form carries a field named `website` that people never see (hidden with CSS,
//! `tabindex="-1"`, `autocomplete="off"`, `aria-hidden`), so a person's browser submits it as
//! the empty string; form-filling bots tend to fill it. A request whose `website` is non-empty
//! gets an ordinary-looking `202` with a fresh id and nothing is stored — the caller does that,
//! judging the field only after the proof of work, the target, the daily cap and the spend of
//! the challenge, so that the answer is an accepted proposal's in every way; this module only
//! decides.
//!
//! Decision: **any** non-empty value is a bot, whitespace included. A hidden field has no reason
//! to hold even a space, and trimming would hand bots an easy escape (`" "`). The one human
//! risk is an autofill or password manager that fills a hidden field named `website`; the form
//! must switch autocomplete off for it. Whether a request that omits the field altogether is
//! acceptable is the request schema's decision, not this function's.

/// Whether the honeypot field's value marks the request as a bot's: any non-empty string.
#[must_use]
pub fn is_bot(website: &str) -> bool {
    !website.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_website_is_human() {
        assert!(!is_bot(""));
    }

    #[test]
    fn any_website_value_is_a_bot() {
        assert!(is_bot("https://cheap-pills.example"));
        assert!(is_bot("x"));
    }

    #[test]
    fn whitespace_only_website_is_a_bot() {
        assert!(is_bot(" "));
        assert!(is_bot("\n"));
        assert!(is_bot("\u{200B}"));
    }
}
