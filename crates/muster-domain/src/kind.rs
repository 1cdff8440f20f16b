//! The ten worker kinds.

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

named_values!(Kind, all: Kind::ALL, error: UnknownKind = |s: &str| UnknownKind(s.to_owned()));

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
