use super::*;

#[test]
fn an_escaped_nul_in_a_json_string_is_found() {
    assert!(json_has_nul(br#"{"idempotency_key": "a\u0000b"}"#));
}

#[test]
fn an_escaped_nul_in_a_json_key_is_found() {
    assert!(json_has_nul(br#"{"payload": {"\u0000": 1}}"#));
}

#[test]
fn an_escaped_backslash_before_u0000_is_plain_text() {
    assert!(!json_has_nul(br#"{"k": "a\\u0000b"}"#));
}

#[test]
fn three_backslashes_before_u0000_are_a_backslash_and_a_nul() {
    assert!(json_has_nul(br#"{"k": "a\\\u0000b"}"#));
}

#[test]
fn other_escapes_pass() {
    assert!(!json_has_nul(br#"{"k": "\u0001\u0030"}"#));
    assert!(!json_has_nul(br#"{"k": "\n\t\u00e9"}"#));
}

#[test]
fn a_malformed_percent_encoding_in_the_path_is_refused() {
    assert!(uri_fault("/v1/items/%zz", None).is_some());
    assert!(uri_fault("/v1/items/%F", None).is_some());
}

#[test]
fn a_path_that_does_not_decode_to_utf8_is_refused() {
    assert!(uri_fault("/v1/items/%FF", None).is_some());
}

#[test]
fn a_nul_in_the_path_or_the_query_is_refused() {
    assert!(uri_fault("/v1/items/a%00b", None).is_some());
    assert!(uri_fault("/v1/edits", Some("state=pending&after=%00")).is_some());
}

#[test]
fn a_well_formed_uri_passes() {
    assert!(uri_fault("/v1/items/%C3%A9", Some("state=pending&limit=5")).is_none());
}
