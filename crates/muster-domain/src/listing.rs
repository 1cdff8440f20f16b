//! Finding items: the filters and page bounds of `GET /v1/items`, and the bound of a bulk retry.

use crate::{ItemId, ItemState, Kind, Priority};

/// Items one page holds when the caller does not say.
pub const DEFAULT_PAGE: u32 = 100;
/// The most items one page may hold.
pub const MAX_PAGE: u32 = 500;
/// The most failed items one bulk retry may send back to the queue.
pub const MAX_BULK_RETRY: u32 = 1000;

/// A bound the caller asked for is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    #[error("limit must be 1 to {MAX_PAGE}")]
    Limit,
    #[error("max must be 1 to {MAX_BULK_RETRY}")]
    Max,
}

/// One page of items to find: every filter optional, oldest first by id, after `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemFilter {
    pub state: Option<ItemState>,
    pub kind: Option<Kind>,
    pub priority: Option<Priority>,
    pub after: Option<ItemId>,
    limit: u32,
}

impl ItemFilter {
    /// A page of `limit` items (1 to [`MAX_PAGE`]; [`DEFAULT_PAGE`] when `None`).
    pub fn new(
        state: Option<ItemState>,
        kind: Option<Kind>,
        priority: Option<Priority>,
        after: Option<ItemId>,
        limit: Option<u32>,
    ) -> Result<Self, ListingError> {
        let limit = limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ListingError::Limit);
        }
        Ok(ItemFilter {
            state,
            kind,
            priority,
            after,
            limit,
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether no filter narrows the items (every state, kind and priority).
    pub fn is_unfiltered(&self) -> bool {
        self.state.is_none() && self.kind.is_none() && self.priority.is_none()
    }

    /// Every (state, kind, priority) the page may hold: the filter's value, or all of them
    /// where it has none. The adapter reads each group in id order and merges them, so a page
    /// costs the same whatever else the table holds.
    pub fn groups(&self) -> Vec<(ItemState, Kind, Priority)> {
        let states = self.state.map_or(ItemState::ALL.to_vec(), |s| vec![s]);
        let kinds = self.kind.map_or(Kind::ALL.to_vec(), |k| vec![k]);
        let priorities = self.priority.map_or(Priority::ALL.to_vec(), |p| vec![p]);
        let mut out = Vec::with_capacity(states.len() * kinds.len() * priorities.len());
        for &s in &states {
            for &k in &kinds {
                for &p in &priorities {
                    out.push((s, k, p));
                }
            }
        }
        out
    }
}

/// How many failed items one bulk retry may take: 1 to [`MAX_BULK_RETRY`].
pub fn bulk_retry_max(max: u32) -> Result<u32, ListingError> {
    if (1..=MAX_BULK_RETRY).contains(&max) {
        Ok(max)
    } else {
        Err(ListingError::Max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_one_hundred_items_unless_asked() {
        let f = ItemFilter::new(None, None, None, None, None).unwrap();
        assert_eq!(f.limit(), 100);
    }

    #[test]
    fn a_page_of_zero_or_more_than_five_hundred_items_is_refused() {
        assert_eq!(
            ItemFilter::new(None, None, None, None, Some(0)),
            Err(ListingError::Limit)
        );
        assert_eq!(
            ItemFilter::new(None, None, None, None, Some(501)),
            Err(ListingError::Limit)
        );
    }

    #[test]
    fn a_state_filter_alone_spans_every_kind_and_priority() {
        let f = ItemFilter::new(Some(ItemState::Failed), None, None, None, None).unwrap();
        assert_eq!(f.groups().len(), 30);
        assert!(f.groups().iter().all(|g| g.0 == ItemState::Failed));
    }

    #[test]
    fn a_bulk_retry_takes_one_to_a_thousand_items() {
        assert_eq!(bulk_retry_max(1), Ok(1));
        assert_eq!(bulk_retry_max(1000), Ok(1000));
        assert_eq!(bulk_retry_max(0), Err(ListingError::Max));
        assert_eq!(bulk_retry_max(1001), Err(ListingError::Max));
    }
}
