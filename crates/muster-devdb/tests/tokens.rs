//! Development tokens and the server's token file.

use muster_devdb::{DevTokens, new_token};
use serde_json::Value;

#[test]
fn tokens_file_holds_blake3_hashes_not_tokens() {
    let token = new_token();
    assert!(token.starts_with("mst_") && token.len() == 68, "{token}");
    let tokens = DevTokens::new(["operator", "worker:trawl"]);
    let file = tokens.server_file();
    let json: Value = serde_json::from_str(&file).expect("JSON");
    let entry = &json["tokens"][0];
    assert_eq!(entry["principal"], "operator");
    let operator = tokens.token("operator").expect("a token for the operator");
    assert_eq!(
        entry["blake3"],
        blake3::hash(operator.as_bytes()).to_hex().as_str()
    );
    assert!(!file.contains(operator));
    assert_eq!(json["tokens"][1]["principal"], "worker:trawl");
    assert_ne!(tokens.token("worker:trawl"), Some(operator));
    assert_eq!(tokens.token("conn"), None);
}

#[test]
fn the_token_file_is_written_where_asked() {
    let path =
        std::env::temp_dir().join(format!("muster-devdb-tokens-{}.json", std::process::id()));
    let tokens = DevTokens::write(&path, ["conn"]).expect("written");
    let written = std::fs::read_to_string(&path).expect("read back");
    let _ = std::fs::remove_file(&path);
    assert_eq!(written, tokens.server_file());
}
