//! `ownership_map.json`: which owner answers for which edit target.
//!
//! ```json
//! {"version": 1, "targets": {"<target id>": {"owner": "<owner id>", "title": "…"}}}
//! ```
//!
//! [`OwnershipMap::from_json`] is strict, because the map is configuration and a typo should
//! stop a deployment rather than silently drop a target:
//!
//! * `version` must be the number 1 ([`OwnershipError::UnsupportedVersion`] otherwise; the
//!   version is read before anything else, so a future format is reported as such);
//! * unknown fields are refused at every level, and every field is required;
//! * a target id must be non-empty and must appear once (JSON allows duplicate object keys;
//!   this map does not);
//! * an owner id must be non-empty (a title may be empty).
//!
//! A map error is a deployment fault, not a client's; a request naming a target the map lacks
//! gets [`UnknownTarget`].

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

/// The only map format version understood.
pub const SUPPORTED_VERSION: u64 = 1;

/// One target's entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The owner id who reviews edits to this target.
    pub owner: String,
    /// Human-readable title.
    pub title: String,
}

/// The parsed `ownership_map.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnershipMap {
    targets: BTreeMap<String, Target>,
}

/// Why `ownership_map.json` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    /// Not JSON, or not the documented shape (unknown or missing field, wrong type).
    #[error("ownership map is not valid: {0}")]
    Invalid(String),
    /// `version` is a number other than 1.
    #[error("ownership map version {0} is not supported (expected 1)")]
    UnsupportedVersion(u64),
    /// A target id is the empty string.
    #[error("ownership map has an empty target id")]
    EmptyTargetId,
    /// A target id appears twice.
    #[error("ownership map lists target {0:?} twice")]
    DuplicateTarget(String),
    /// A target's owner id is the empty string.
    #[error("ownership map gives target {0:?} an empty owner")]
    EmptyOwner(String),
}

/// A request named a target that the ownership map does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown edit target")]
pub struct UnknownTarget;

/// First pass: only the version, whatever else the document holds.
#[derive(Deserialize)]
struct VersionProbe {
    version: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMap {
    version: u64,
    targets: Entries,
}

/// A JSON object's entries in document order, duplicates kept (so they can be refused).
struct Entries(Vec<(String, Target)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;

        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping target ids to targets")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Target>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor)
    }
}

impl OwnershipMap {
    /// Parses and validates the text of `ownership_map.json`.
    ///
    /// # Errors
    ///
    /// An [`OwnershipError`] for the first rule broken (see the module docs).
    pub fn from_json(text: &str) -> Result<Self, OwnershipError> {
        let invalid = |e: serde_json::Error| OwnershipError::Invalid(e.to_string());
        let probe: VersionProbe = serde_json::from_str(text).map_err(invalid)?;
        match probe.version.as_ref().and_then(serde_json::Value::as_u64) {
            Some(version) if version != SUPPORTED_VERSION => {
                return Err(OwnershipError::UnsupportedVersion(version));
            }
            _ => {}
        }
        let raw: RawMap = serde_json::from_str(text).map_err(invalid)?;
        if raw.version != SUPPORTED_VERSION {
            return Err(OwnershipError::UnsupportedVersion(raw.version));
        }
        let mut targets = BTreeMap::new();
        for (id, target) in raw.targets.0 {
            if id.is_empty() {
                return Err(OwnershipError::EmptyTargetId);
            }
            if target.owner.is_empty() {
                return Err(OwnershipError::EmptyOwner(id));
            }
            if targets.contains_key(&id) {
                return Err(OwnershipError::DuplicateTarget(id));
            }
            targets.insert(id, target);
        }
        Ok(Self { targets })
    }

    /// The entry for `target`, if the map lists it.
    #[must_use]
    pub fn get(&self, target: &str) -> Option<&Target> {
        self.targets.get(target)
    }

    /// The entry for `target`.
    ///
    /// # Errors
    ///
    /// [`UnknownTarget`] if the map does not list it.
    pub fn require(&self, target: &str) -> Result<&Target, UnknownTarget> {
        self.get(target).ok_or(UnknownTarget)
    }

    /// Whether the map lists `target`.
    #[must_use]
    pub fn contains(&self, target: &str) -> bool {
        self.targets.contains_key(target)
    }

    /// The owner id of `target`, if the map lists it.
    #[must_use]
    pub fn owner_of(&self, target: &str) -> Option<&str> {
        self.get(target).map(|t| t.owner.as_str())
    }

    /// The title of `target`, if the map lists it.
    #[must_use]
    pub fn title_of(&self, target: &str) -> Option<&str> {
        self.get(target).map(|t| t.title.as_str())
    }

    /// Number of targets.
    #[must_use]
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether the map lists no target.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// Target ids and entries, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Target)> {
        self.targets.iter().map(|(id, t)| (id.as_str(), t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = r#"{
        "version": 1,
        "targets": {
            "docs/intro": {"owner": "team-docs", "title": "Introduction"},
            "api/leases": {"owner": "team-core", "title": ""}
        }
    }"#;

    fn parse(text: &str) -> Result<OwnershipMap, OwnershipError> {
        OwnershipMap::from_json(text)
    }

    fn invalid_message(text: &str) -> String {
        match parse(text) {
            Err(OwnershipError::Invalid(message)) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn valid_map_gives_owners_and_titles() {
        let map = parse(VALID).expect("valid");
        assert_eq!(map.len(), 2);
        assert_eq!(map.owner_of("docs/intro"), Some("team-docs"));
        assert_eq!(map.title_of("docs/intro"), Some("Introduction"));
        assert_eq!(map.owner_of("api/leases"), Some("team-core"));
        assert_eq!(map.title_of("api/leases"), Some(""));
    }

    #[test]
    fn unlisted_target_has_no_owner_and_is_unknown() {
        let map = parse(VALID).expect("valid");
        assert_eq!(map.owner_of("docs/missing"), None);
        assert_eq!(map.title_of("docs/missing"), None);
        assert!(!map.contains("docs/missing"));
        assert_eq!(map.require("docs/missing"), Err(UnknownTarget));
        assert_eq!(UnknownTarget.to_string(), "unknown edit target");
    }

    #[test]
    fn target_lookup_is_exact() {
        let map = parse(VALID).expect("valid");
        assert!(map.contains("docs/intro"));
        assert!(!map.contains("Docs/intro"));
        assert!(!map.contains("docs/intro "));
    }

    #[test]
    fn require_returns_the_entry() {
        let map = parse(VALID).expect("valid");
        assert_eq!(
            map.require("docs/intro"),
            Ok(&Target {
                owner: "team-docs".into(),
                title: "Introduction".into()
            })
        );
    }

    #[test]
    fn iter_lists_targets_in_id_order() {
        let map = parse(VALID).expect("valid");
        let ids: Vec<&str> = map.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["api/leases", "docs/intro"]);
    }

    #[test]
    fn empty_targets_object_is_a_valid_empty_map() {
        let map = parse(r#"{"version": 1, "targets": {}}"#).expect("valid");
        assert!(map.is_empty());
    }

    #[test]
    fn wrong_version_is_refused() {
        assert_eq!(
            parse(r#"{"version": 2, "targets": {}}"#),
            Err(OwnershipError::UnsupportedVersion(2))
        );
    }

    #[test]
    fn future_version_with_new_fields_is_reported_as_a_version_error() {
        assert_eq!(
            parse(r#"{"version": 2, "targets": {}, "groups": {}}"#),
            Err(OwnershipError::UnsupportedVersion(2))
        );
    }

    #[test]
    fn non_numeric_or_missing_version_is_invalid() {
        assert!(invalid_message(r#"{"version": "1", "targets": {}}"#).contains("invalid type"));
        assert!(invalid_message(r#"{"targets": {}}"#).contains("missing field `version`"));
        assert!(invalid_message(r#"{"version": -1, "targets": {}}"#).contains("invalid value"));
    }

    #[test]
    fn unknown_top_level_field_is_refused() {
        let message = invalid_message(r#"{"version": 1, "targets": {}, "extra": true}"#);
        assert!(message.contains("unknown field `extra`"), "{message}");
    }

    #[test]
    fn unknown_target_field_is_refused() {
        let message = invalid_message(
            r#"{"version": 1, "targets": {"a": {"owner": "o", "title": "t", "team": "x"}}}"#,
        );
        assert!(message.contains("unknown field `team`"), "{message}");
    }

    #[test]
    fn missing_title_is_refused() {
        let message = invalid_message(r#"{"version": 1, "targets": {"a": {"owner": "o"}}}"#);
        assert!(message.contains("missing field `title`"), "{message}");
    }

    #[test]
    fn empty_target_id_is_refused() {
        assert_eq!(
            parse(r#"{"version": 1, "targets": {"": {"owner": "o", "title": "t"}}}"#),
            Err(OwnershipError::EmptyTargetId)
        );
    }

    #[test]
    fn empty_owner_is_refused() {
        assert_eq!(
            parse(r#"{"version": 1, "targets": {"a": {"owner": "", "title": "t"}}}"#),
            Err(OwnershipError::EmptyOwner("a".into()))
        );
    }

    #[test]
    fn duplicate_target_id_is_refused() {
        assert_eq!(
            parse(
                r#"{"version": 1, "targets": {
                    "a": {"owner": "o", "title": "t"},
                    "a": {"owner": "p", "title": "u"}}}"#
            ),
            Err(OwnershipError::DuplicateTarget("a".into()))
        );
    }

    #[test]
    fn non_json_is_invalid() {
        assert!(matches!(
            parse("version = 1"),
            Err(OwnershipError::Invalid(_))
        ));
        assert!(matches!(parse(""), Err(OwnershipError::Invalid(_))));
    }
}
