//! Priority classes: urgent before normal before backfill.

/// Priority class of an item. The derived order is the lease order: `Urgent < Normal < Backfill`
/// means urgent is handed out first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Urgent,
    Normal,
    Backfill,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Urgent, Priority::Normal, Priority::Backfill];

    pub const fn as_str(self) -> &'static str {
        match self {
            Priority::Urgent => "urgent",
            Priority::Normal => "normal",
            Priority::Backfill => "backfill",
        }
    }

    /// The rank stored in Logbook: lower is leased first.
    pub const fn rank(self) -> i16 {
        match self {
            Priority::Urgent => 0,
            Priority::Normal => 1,
            Priority::Backfill => 2,
        }
    }

    pub fn from_rank(rank: i16) -> Option<Self> {
        Priority::ALL.into_iter().find(|p| p.rank() == rank)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown priority {0:?} (expected urgent, normal or backfill)")]
pub struct UnknownPriority(pub String);

named_values!(Priority, all: Priority::ALL, error: UnknownPriority = |s: &str| UnknownPriority(s.to_owned()));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_sorts_before_normal_before_backfill() {
        let mut v = vec![Priority::Backfill, Priority::Urgent, Priority::Normal];
        v.sort();
        assert_eq!(v, [Priority::Urgent, Priority::Normal, Priority::Backfill]);
    }

    #[test]
    fn rank_follows_the_lease_order_and_round_trips() {
        for p in Priority::ALL {
            assert_eq!(Priority::from_rank(p.rank()), Some(p));
        }
        assert!(Priority::Urgent.rank() < Priority::Backfill.rank());
    }
}
