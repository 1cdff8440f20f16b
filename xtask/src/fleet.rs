//! The files of a simulated fleet's run (`cargo xtask chaos`, `cargo xtask demo`): the server's
//! tokens and pipeline, and the fleet's plain tokens.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;
use muster_devdb::DevTokens;
use serde_json::Value;

use crate::dev_principals;
use crate::procs::write_private;

/// Retry policy of every kind: quick backoff, and enough attempts that only the plans end
/// chains in `failed` (with the default 5, repeated injected faults could use up an item's
/// attempts, which would be correct behaviour but not the plan's outcome).
pub(crate) const PIPELINE: &str = r#"{"retry": {
  "trawl": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "sextant": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "assay": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "countersign": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "waybill": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "moldloft": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "shakedown": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "chartroom": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "tidegauge": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "bellbuoy": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25}
}}"#;

/// The files a fleet run needs in `dir`: the server's token file (BLAKE3 hashes), the fleet's
/// plain tokens (owner-only), and the pipeline file.
pub(crate) struct FleetFiles {
    pub(crate) tokens: PathBuf,
    pub(crate) sim_tokens: PathBuf,
    pub(crate) pipeline: PathBuf,
}

/// Writes [`FleetFiles`] with a fresh token for every dev principal.
pub(crate) fn fleet_files(dir: &Path) -> Result<FleetFiles> {
    let tokens_path = dir.join("tokens.json");
    let tokens = DevTokens::write(&tokens_path, dev_principals())?;
    let plain: serde_json::Map<String, Value> = tokens
        .pairs()
        .iter()
        .map(|(p, t)| (p.clone(), Value::String(t.clone())))
        .collect();
    let sim_tokens = dir.join("sim-tokens.json");
    write_private(&sim_tokens, Value::Object(plain).to_string().as_bytes())?;
    let pipeline = dir.join("pipeline.json");
    fs::write(&pipeline, PIPELINE)?;
    Ok(FleetFiles {
        tokens: tokens_path,
        sim_tokens,
        pipeline,
    })
}
