//! The pipeline file: routes, per-kind retry policies and per-kind limits.
//!
//! ```json
//! {"routes": {"trawl": ["sextant"], "sextant": ["assay"]},
//!  "retry": {"trawl": {"base_ms": 2000, "factor": 2.0, "cap_ms": 600000, "max_attempts": 5}},
//!  "limits": {"trawl": {"max_run_ms": 3600000}}}
//! ```
//! Without a file (or without `routes`), the default chain trawl -> … -> bellbuoy applies;
//! kinds without a `retry` entry use the defaults of the contract, kinds without a `limits`
//! entry the contract's maximum run time (one hour).

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
    #[serde(default)]
    limits: BTreeMap<Kind, LimitsFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    max_run_ms: u64,
}

/// What the pipeline file says.
#[derive(Debug, Default)]
pub struct Pipeline {
    pub routes: Routes,
    pub retry: HashMap<Kind, RetryPolicy>,
    /// Maximum run time per kind.
    pub max_run: HashMap<Kind, time::Duration>,
}

/// The longest maximum run time a kind may be given: a day (a lease that outlives it holds
/// its item for longer than any operator would wait unwarned).
const MAX_MAX_RUN_MS: u64 = 86_400_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryFile {
    base_ms: u64,
    factor: f64,
    cap_ms: u64,
    max_attempts: u32,
}

pub fn parse(text: &str) -> anyhow::Result<Pipeline> {
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
    let mut max_run = HashMap::new();
    for (kind, l) in file.limits {
        if !(1_000..=MAX_MAX_RUN_MS).contains(&l.max_run_ms) {
            bail!("limits of {kind}: max_run_ms must be 1000 to {MAX_MAX_RUN_MS}");
        }
        max_run.insert(kind, time::Duration::milliseconds(l.max_run_ms as i64));
    }
    Ok(Pipeline {
        routes,
        retry,
        max_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_keeps_the_default_chain_and_policies() {
        let p = parse("{}").unwrap();
        assert_eq!(p.routes, Routes::default());
        assert!(p.retry.is_empty());
        assert!(p.max_run.is_empty());
    }

    #[test]
    fn routes_and_retry_policies_are_read_per_kind() {
        let p = parse(
            r#"{"routes": {"trawl": ["assay"]}, "retry": {"trawl": {"base_ms": 100, "factor": 3, "cap_ms": 1000, "max_attempts": 2}}}"#,
        )
        .unwrap();
        assert!(p.routes.allows(Kind::Trawl, Kind::Assay));
        assert!(!p.routes.allows(Kind::Trawl, Kind::Sextant));
        assert_eq!(p.retry[&Kind::Trawl].max_attempts, 2);
    }

    #[test]
    fn a_policy_with_no_attempts_is_refused() {
        assert!(parse(r#"{"retry": {"trawl": {"base_ms": 1, "factor": 2, "cap_ms": 1, "max_attempts": 0}}}"#).is_err());
    }

    #[test]
    fn a_kinds_maximum_run_time_is_read_from_limits() {
        let p = parse(r#"{"limits": {"sextant": {"max_run_ms": 120000}}}"#).unwrap();
        assert_eq!(p.max_run[&Kind::Sextant], time::Duration::minutes(2));
        assert_eq!(p.max_run.get(&Kind::Trawl), None);
    }

    #[test]
    fn a_maximum_run_time_under_a_second_or_over_a_day_is_refused() {
        for ms in [0, 999, 86_400_001] {
            let text = format!(r#"{{"limits": {{"trawl": {{"max_run_ms": {ms}}}}}}}"#);
            assert!(parse(&text).is_err(), "{ms}");
        }
    }
}
