//! Pipeline routes: which kind may enqueue `next` items of which kinds.

use std::collections::{BTreeMap, BTreeSet};

use crate::Kind;

/// The allowed edges of the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    edges: BTreeMap<Kind, BTreeSet<Kind>>,
}

impl Default for Routes {
    /// The default chain: trawl -> sextant -> assay -> … -> bellbuoy.
    fn default() -> Self {
        Routes::from_edges(Kind::ALL.windows(2).map(|w| (w[0], w[1])))
    }
}

impl Routes {
    pub fn from_edges(edges: impl IntoIterator<Item = (Kind, Kind)>) -> Self {
        let mut map: BTreeMap<Kind, BTreeSet<Kind>> = BTreeMap::new();
        for (from, to) in edges {
            map.entry(from).or_default().insert(to);
        }
        Routes { edges: map }
    }

    /// No kind may enqueue anything.
    pub fn none() -> Self {
        Routes {
            edges: BTreeMap::new(),
        }
    }

    pub fn allows(&self, from: Kind, to: Kind) -> bool {
        self.edges.get(&from).is_some_and(|s| s.contains(&to))
    }

    /// The first target of `next` that the routes refuse, if any.
    pub fn first_refused(&self, from: Kind, next: impl IntoIterator<Item = Kind>) -> Option<Kind> {
        next.into_iter().find(|to| !self.allows(from, *to))
    }

    pub fn targets(&self, from: Kind) -> impl Iterator<Item = Kind> + '_ {
        self.edges.get(&from).into_iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_chain_allows_each_stage_to_feed_the_next() {
        let r = Routes::default();
        assert!(r.allows(Kind::Trawl, Kind::Sextant));
        assert!(r.allows(Kind::Tidegauge, Kind::Bellbuoy));
        assert_eq!(
            r.targets(Kind::Assay).collect::<Vec<_>>(),
            [Kind::Countersign]
        );
    }

    #[test]
    fn the_default_chain_refuses_skips_loops_and_the_last_stage() {
        let r = Routes::default();
        assert!(!r.allows(Kind::Trawl, Kind::Assay));
        assert!(!r.allows(Kind::Sextant, Kind::Trawl));
        assert!(!r.allows(Kind::Trawl, Kind::Trawl));
        assert_eq!(r.targets(Kind::Bellbuoy).count(), 0);
    }

    #[test]
    fn first_refused_names_the_offending_target() {
        let r = Routes::default();
        assert_eq!(
            r.first_refused(Kind::Trawl, [Kind::Sextant, Kind::Waybill]),
            Some(Kind::Waybill)
        );
        assert_eq!(r.first_refused(Kind::Trawl, [Kind::Sextant]), None);
    }
}
