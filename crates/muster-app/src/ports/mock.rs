//! The transaction mock: one type that plays every role, as `LogbookTx` demands (mockall's
//! `automock` cannot see supertraits, so `mock!` spells the roles out).

use async_trait::async_trait;
use muster_domain::edit::{Edit, EditId};
use muster_domain::pause::KindPause;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, ItemId, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord};
use muster_ledger::SealedEntry;
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    FleetStore, Inserted, IntakeStore, ItemStore, KindStore, Leasable, LeasableQuery, LeaseStore,
    LedgerAppend, LockedLease, LogbookTx, NewItem, StoreError,
};

mockall::mock! {
    pub LogbookTx {}

    #[async_trait]
    impl ItemStore for LogbookTx {
        async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError>;
        async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError>;
        async fn lock_item(&mut self, id: ItemId) -> Result<Option<(Item, Option<TraceContext>)>, StoreError>;
        async fn lock_oldest(&mut self, kind: Kind, state: ItemState, max: u32) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError>;
        async fn save_item(&mut self, item: &Item) -> Result<(), StoreError>;
        async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LeaseStore for LogbookTx {
        async fn lock_next_leasable(&mut self, wanted: LeasableQuery) -> Result<Vec<Leasable>, StoreError>;
        async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<LockedLease>, StoreError>;
        async fn lock_leases(&mut self, ids: &[LeaseId]) -> Result<Vec<LockedLease>, StoreError>;
        async fn insert_leases(&mut self, leases: &[LeaseRecord], kind: Kind, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn finish_lease(&mut self, id: LeaseId, outcome: &LeaseOutcome, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn finish_leases(&mut self, outcomes: &[(LeaseId, LeaseOutcome)], at: OffsetDateTime) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LedgerAppend for LogbookTx {
        async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError>;
    }

    #[async_trait]
    impl FleetStore for LogbookTx {
        async fn record_digest(&mut self, kind: Kind, digest: &str, at: OffsetDateTime) -> Result<Option<String>, StoreError>;
        async fn deployed_digest(&mut self, kind: Kind) -> Result<Option<String>, StoreError>;
        async fn lock_parked(&mut self, kind: Kind, deployed: &str) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError>;
    }

    #[async_trait]
    impl IntakeStore for LogbookTx {
        async fn day_salt(&mut self, day: time::Date, candidate: [u8; 32]) -> Result<[u8; 32], StoreError>;
        async fn count_submission(&mut self, day: time::Date, client_hash: [u8; 32], limit: u32) -> Result<bool, StoreError>;
        async fn spend_challenge(&mut self, spend_key: [u8; 32], expires_at: OffsetDateTime) -> Result<bool, StoreError>;
        async fn insert_edit(&mut self, edit: &Edit, body: &str, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError>;
        async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl KindStore for LogbookTx {
        async fn lock_kind(&mut self, kind: Kind) -> Result<KindPause, StoreError>;
        async fn save_kind(&mut self, pause: &KindPause) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LogbookTx for LogbookTx {
        async fn commit(self: Box<Self>) -> Result<(), StoreError>;
        async fn now(&mut self) -> Result<OffsetDateTime, StoreError>;
        async fn append_and_commit(self: Box<Self>, entries: &[SealedEntry]) -> Result<(), StoreError>;
    }
}

/// A Logbook that opens exactly one transaction, `tx` (a second `begin` fails the test).
pub fn logbook_with(tx: MockLogbookTx) -> super::MockLogbook {
    let mut lb = super::MockLogbook::new();
    let mut slot = Some(tx);
    lb.expect_begin()
        .times(1)
        .returning(move || Ok(Box::new(slot.take().expect("one transaction"))));
    lb
}
