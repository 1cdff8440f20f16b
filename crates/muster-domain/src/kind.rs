//! The ten worker kinds.

use std::fmt;
use std::str::FromStr;

/// A kind of worker, and so a kind of item: the stage of the pipeline it belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Trawl,
    Sextant,
    Assay,
    Countersign,
    Waybill,
    Moldloft,
    Shakedown,
    Chartroom,
    Tidegauge,
    Bellbuoy,
}

impl Kind {
    /// Every kind, in the order of the default pipeline.
    pub const ALL: [Kind; 10] = [
        Kind::Trawl,
        Kind::Sextant,
        Kind::Assay,
        Kind::Countersign,
        Kind::Waybill,
        Kind::Moldloft,
        Kind::Shakedown,
        Kind::Chartroom,
        Kind::Tidegauge,
        Kind::Bellbuoy,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Trawl => "trawl",
            Kind::Sextant => "sextant",
            Kind::Assay => "assay",
            Kind::Countersign => "countersign",
            Kind::Waybill => "waybill",
            Kind::Moldloft => "moldloft",
            Kind::Shakedown => "shakedown",
            Kind::Chartroom => "chartroom",
            Kind::Tidegauge => "tidegauge",
            Kind::Bellbuoy => "bellbuoy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown worker kind {0:?}")]
pub struct UnknownKind(pub String);

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_name() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        }
    }

    #[test]
    fn names_are_case_sensitive() {
        assert_eq!(
            "Trawl".parse::<Kind>(),
            Err(UnknownKind("Trawl".to_owned()))
        );
    }
}
