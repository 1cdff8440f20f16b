//! The pipeline file: routes and per-kind retry policies.
//!
//! ```json
//! {"routes": {"trawl": ["sextant"], "sextant": ["assay"]},
//!  "retry": {"trawl": {"base_ms": 2000, "factor": 2.0, "cap_ms": 600000, "max_attempts": 5}}}
//! ```
//! Without a file (or without `routes`), the default chain trawl -> … -> bellbuoy applies;
//! kinds without a `retry` entry use the defaults of the contract.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, bail};
use muster_domain::{Kind, RetryPolicy, Routes};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineFile {
    #[serde(default)]
    routes: Option<BTreeMap<Kind, Vec<Kind>>>,
    #[serde(default)]
    retry: BTreeMap<Kind, RetryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryFile {
    base_ms: u64,
    factor: f64,
    cap_ms: u64,
    max_attempts: u32,
}

pub fn parse(text: &str) -> anyhow::Result<(Routes, HashMap<Kind, RetryPolicy>)> {
    let file: PipelineFile = serde_json::from_str(text).context("pipeline file")?;
    let routes = match file.routes {
        Some(map) => Routes::from_edges(
            map.into_iter()
                .flat_map(|(from, tos)| tos.into_iter().map(move |to| (from, to))),
        ),
        None => Routes::default(),
    };
    let mut retry = HashMap::new();
    for (kind, r) in file.retry {
        if !(r.factor.is_finite() && r.factor >= 1.0)
            || r.max_attempts == 0
            || r.base_ms == 0
            || r.cap_ms < r.base_ms
        {
            bail!(
                "retry policy of {kind}: need base_ms > 0, cap_ms >= base_ms, factor >= 1, max_attempts >= 1"
            );
        }
        retry.insert(
            kind,
            RetryPolicy {
                base: time::Duration::milliseconds(r.base_ms as i64),
                factor: r.factor,
                cap: time::Duration::milliseconds(r.cap_ms as i64),
                max_attempts: r.max_attempts,
            },
        );
    }
    Ok((routes, retry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_keeps_the_default_chain_and_policies() {
        let (routes, retry) = parse("{}").unwrap();
        assert_eq!(routes, Routes::default());
        assert!(retry.is_empty());
    }

    #[test]
    fn routes_and_retry_policies_are_read_per_kind() {
        let (routes, retry) = parse(
            r#"{"routes": {"trawl": ["assay"]}, "retry": {"trawl": {"base_ms": 100, "factor": 3, "cap_ms": 1000, "max_attempts": 2}}}"#,
        )
        .unwrap();
        assert!(routes.allows(Kind::Trawl, Kind::Assay));
        assert!(!routes.allows(Kind::Trawl, Kind::Sextant));
        assert_eq!(retry[&Kind::Trawl].max_attempts, 2);
    }

    #[test]
    fn a_policy_with_no_attempts_is_refused() {
        assert!(parse(r#"{"retry": {"trawl": {"base_ms": 1, "factor": 2, "cap_ms": 1, "max_attempts": 0}}}"#).is_err());
    }
}
