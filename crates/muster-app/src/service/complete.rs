//! Completing leases: one, one with the next lease, or a batch, always through one
//! transaction that checks each completion as if it were alone.

use std::collections::{HashMap, HashSet};

use muster_domain::item::LeaseUse;
use muster_domain::trace::TraceContext;
use muster_domain::{
    Item, ItemId, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord, OutcomeKind, Principal,
    TransitionError, request_digest,
};
use serde_json::{Value, json};

use super::{
    LeaseWant, Muster, NextLease, check_batch_next, check_completions_batch, check_worker_id,
    require_object, require_storable, splits, to_value,
};
use crate::error::AppError;
use crate::ports::NewItem;
use crate::views::{
    CompleteRequest, Completed, CompletedAndLeased, CompletionSpans, ItemTrace, LeaseGranted,
};

impl Muster {
    /// `POST /v1/leases/{id}/complete`: the item's new state, its result, every `next` item
    /// and their ledger rows, in one transaction. Concurrent completions of one worker kind
    /// share that transaction (group commit): each is answered exactly as alone, and none
    /// is answered before its transaction committed.
    pub async fn complete(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
    ) -> Result<Completed, AppError> {
        if let Some(w) = &req.worker_id {
            check_worker_id(w)?;
        }
        Ok(self
            .complete_grouped(actor, lease_id, req, NextLease::NotAsked)
            .await?
            .0)
    }

    /// `POST /v1/leases/{id}/complete` with `"lease_next": true`: the completion and, in the
    /// same transaction, a new lease for the same worker (`None` when nothing is leasable now).
    /// A replayed completion leases afresh: the worker asks for work, and a lease granted in a
    /// lost answer simply expires.
    pub async fn complete_and_lease(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
        worker_id: Option<String>,
    ) -> Result<CompletedAndLeased, AppError> {
        for w in [&worker_id, &req.worker_id].into_iter().flatten() {
            check_worker_id(w)?;
        }
        let (completed, next_lease) = self
            .complete_grouped(actor, lease_id, req, NextLease::from(worker_id))
            .await?;
        Ok(CompletedAndLeased {
            completed,
            next_lease,
        })
    }

    /// `POST /v1/completions`: many completions in one transaction. Each is answered exactly
    /// as `complete` would have answered it alone (fencing, idempotent replay, routes, late
    /// results kept in the ledger); one refused completion does not hold the others back.
    /// Logbook unreachable fails the whole batch, and none of it is written; any other failure
    /// of the shared transaction (nothing of it written either) is redone one completion per
    /// transaction, so a body the database refuses fails only its own entry.
    pub async fn complete_many(
        &self,
        actor: Principal,
        reqs: Vec<(LeaseId, CompleteRequest)>,
    ) -> Result<Vec<Result<Completed, AppError>>, AppError> {
        check_batch_next(reqs.iter().map(|(_, r)| r))?;
        let nexts: Vec<_> = reqs.iter().map(|_| NextLease::NotAsked).collect();
        // Kept to complete one by one if the batch fails for a reason of its own.
        let alone = (reqs.len() > 1).then(|| (reqs.clone(), nexts.clone()));
        match (self.complete_batch(actor, reqs, nexts).await, alone) {
            (Ok((answers, _)), _) => Ok(answers),
            (Err(e), Some((reqs, nexts))) if splits(&e) => {
                // A lease named again is refused as in the shared transaction, not redone.
                let ids: Vec<LeaseId> = reqs.iter().map(|(id, _)| *id).collect();
                let mut seen = HashSet::with_capacity(ids.len());
                let first: Vec<bool> = ids.iter().map(|id| seen.insert(*id)).collect();
                let redone = self
                    .complete_each_alone(actor, &e, reqs, nexts, |i| first[i])
                    .await;
                Ok(redone
                    .into_iter()
                    .zip(ids)
                    .map(|(a, id)| match a {
                        Some(answer) => answer.map(|(done, _)| done),
                        None => Err(AppError::BadRequest(format!(
                            "lease {id} appears more than once in the batch"
                        ))),
                    })
                    .collect())
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Completions, and for each that succeeded and asked for one (`lease_nexts`) a new lease, all in one transaction. The next leases are answered in
    /// request order (`None`: not asked for, refused, or nothing leasable now).
    pub(super) async fn complete_batch(
        &self,
        actor: Principal,
        reqs: Vec<(LeaseId, CompleteRequest)>,
        lease_nexts: Vec<NextLease>,
    ) -> Result<(Vec<Result<Completed, AppError>>, Vec<Option<LeaseGranted>>), AppError> {
        check_completions_batch(reqs.len())?;
        let mut tx = self.stores.logbook.begin().await?;
        let ids: Vec<LeaseId> = reqs.iter().map(|(id, _)| *id).collect();
        let mut locked: HashMap<LeaseId, LeaseRecord> = HashMap::with_capacity(reqs.len());
        // One item may appear under several leases (an old, superseded one and the current
        // one): each completion sees the item as the ones before it left it.
        let mut items: HashMap<ItemId, (Item, Option<TraceContext>)> =
            HashMap::with_capacity(reqs.len());
        for (record, item, trace) in tx.lock_leases(&ids).await? {
            items.entry(item.id).or_insert((item, trace));
            locked.insert(record.lease_id, record);
        }
        // The database's clock (answered with the locks): next leases expire by it.
        let now = tx.now().await?;
        let mut batch = Batch::default();
        let mut answers = Vec::with_capacity(reqs.len());
        let mut seen = HashSet::with_capacity(reqs.len());
        for (lease_id, req) in reqs {
            let answer = match locked.get(&lease_id) {
                _ if !seen.insert(lease_id) => Err(AppError::BadRequest(format!(
                    "lease {lease_id} appears more than once in the batch"
                ))),
                None => Err(self.unknown_lease(lease_id)),
                Some(record) => match items.get_mut(&record.item_id) {
                    None => Err(AppError::Internal(format!(
                        "lease {lease_id} lost its item"
                    ))),
                    Some((item, trace)) => {
                        let traced = ItemTrace::of(item, record.fence, *trace);
                        self.complete_one(actor, record, (item, *trace), req, now, &mut batch)
                            .map(|p| p.traced(traced))
                    }
                },
            };
            answers.push(answer);
        }
        // Who gets a next lease: each completion that asked and went through, for the worker
        // it named or else its lease's worker.
        let mut wants = Vec::new();
        let mut wanted_by = Vec::new();
        for (i, (next, answer)) in lease_nexts.into_iter().zip(&answers).enumerate() {
            let worker = match (next, answer) {
                (NextLease::For(worker_id), Ok(_)) => Some(worker_id),
                (NextLease::ForLeaseWorker, Ok(_)) => {
                    locked.get(&ids[i]).map(|r| r.worker_id.clone())
                }
                _ => None,
            };
            if let Some(worker_id) = worker {
                wants.push(LeaseWant { worker_id, max: 1 });
                wanted_by.push(i);
            }
        }
        let mut next_leases: Vec<Option<LeaseGranted>> = ids.iter().map(|_| None).collect();
        if batch.is_empty() && wants.is_empty() {
            // Nothing to write (replays and refusals only): end the transaction, no COMMIT.
            drop(tx);
            let answers = answers
                .into_iter()
                .map(|a| a.map(Pending::finish))
                .collect();
            return Ok((answers, next_leases));
        }
        let saved: Vec<(Item, Option<Value>)> = batch
            .saved
            .iter()
            .map(|(id, result)| (items[id].0.clone(), result.clone()))
            .collect();
        tx.save_items(&saved).await?;
        if !batch.children.is_empty() {
            tx.insert_items(&batch.children).await?;
        }
        let seqs = tx.append(&batch.entries).await?;
        let mut finished = Vec::with_capacity(batch.finished.len());
        let answers: Vec<Result<Completed, AppError>> = answers
            .into_iter()
            .map(|a| {
                a.and_then(|pending| match pending {
                    Pending::Done(answer) => Ok(answer),
                    Pending::Sealed {
                        lease_id,
                        digest,
                        mut answer,
                        entry,
                    } => {
                        answer.ledger_seq = seqs.get(entry).copied().unwrap_or_default();
                        finished.push((
                            lease_id,
                            LeaseOutcome {
                                kind: OutcomeKind::Completed,
                                digest,
                                response: to_value(&answer)?,
                            },
                        ));
                        Ok(answer)
                    }
                })
            })
            .collect();
        finished.extend(batch.finished);
        tx.finish_leases(&finished, now).await?;
        match actor.worker_kind() {
            Some(kind) if !wants.is_empty() => {
                let leased = self.lease_in(tx.as_mut(), kind, &wants, actor, now).await?;
                self.write_leased(tx, kind, &leased, now).await?;
                if leased.truncated {
                    self.signal.notify(kind);
                }
                for (i, granted) in wanted_by.into_iter().zip(leased.granted) {
                    next_leases[i] = granted.into_iter().next();
                }
            }
            _ => self.commit(tx).await?,
        }
        for (kind, n) in batch.completed {
            self.stats.completed.add(kind, n);
        }
        for (kind, n) in batch.late {
            self.stats.late_results.add(kind, n);
        }
        for (kind, n) in batch.expired {
            self.stats.failed_final.add(kind, n);
        }
        for c in &batch.children {
            self.stats.enqueued.add(c.item.kind, 1);
            self.signal.notify(c.item.kind);
        }
        Ok((answers, next_leases))
    }

    /// One completion of a batch, applied to the locked `item`: its writes go into `batch`.
    fn complete_one(
        &self,
        actor: Principal,
        record: &LeaseRecord,
        (item, trace): (&mut Item, Option<TraceContext>),
        req: CompleteRequest,
        now: time::OffsetDateTime,
        batch: &mut Batch,
    ) -> Result<Pending, AppError> {
        let canonical = json!({
            "result": req.result,
            "next": req.next.iter().map(|n| json!({
                "kind": n.kind, "payload": n.payload, "priority": n.priority,
            })).collect::<Vec<_>>(),
        });
        let digest = request_digest(OutcomeKind::Completed, &canonical);
        let lease_id = record.lease_id;
        item.check_sender(record, actor, req.worker_id.as_deref())?;
        let lost = match item.check_finish(record, actor, OutcomeKind::Completed, &digest) {
            Ok(LeaseUse::Proceed) => {
                // Used after its final grace: the item fails now and the result comes late.
                let expired = self.past_final_grace(record, item, actor, now)?;
                if let Some(entry) = &expired {
                    batch.entries.push(entry.clone());
                    *batch.expired.entry(item.kind).or_default() += 1;
                }
                expired.is_some()
            }
            Ok(LeaseUse::Replay(response)) => {
                let mut answer: Completed = serde_json::from_value(response).map_err(|e| {
                    AppError::Internal(format!("stored completion unreadable: {e}"))
                })?;
                answer.replayed = true;
                return Ok(Pending::Done(answer));
            }
            Err(TransitionError::LeaseLost) if record.outcome.is_none() => true,
            Err(e) => return Err(e.into()),
        };
        if lost {
            // Superseded (or past its final grace): keep the late result in the ledger,
            // apply nothing.
            let entry = item.record_late_result(record, actor, &req.result, now);
            let outcome = LeaseOutcome {
                kind: OutcomeKind::Late,
                digest,
                response: Value::Null,
            };
            batch.save(item.id, None);
            batch.entries.push(entry);
            batch.finished.push((lease_id, outcome));
            *batch.late.entry(item.kind).or_default() += 1;
            tracing::info!(%lease_id, item_id = %item.id, "late result recorded; lease was superseded");
            return Err(AppError::LeaseLost);
        }
        if let Some(to) = self
            .config
            .routes
            .first_refused(item.kind, req.next.iter().map(|n| n.kind))
        {
            return Err(AppError::Route(format!(
                "the pipeline routes do not allow {} to enqueue {to}",
                item.kind
            )));
        }
        for n in &req.next {
            require_object(&n.payload, "next[].payload")?;
        }
        require_storable(&req.result, "result")?;
        let mut children = Vec::with_capacity(req.next.len());
        let next_trace = CompletionSpans::next_items(req.trace, trace);
        for n in req.next {
            let priority = n.priority.unwrap_or(item.priority);
            let (child, entry) = Item::enqueue(
                self.ids.item_id(),
                n.kind,
                priority,
                actor,
                now,
                Some(item.id),
                None,
            );
            children.push(NewItem {
                item: child,
                payload: n.payload,
                idempotency_key: None,
                parent: Some(item.id),
                created_at: now,
                in_line_at: now,
                entry,
                trace: next_trace,
            });
        }
        let child_ids: Vec<ItemId> = children.iter().map(|c| c.item.id).collect();
        let entry = item.complete(record, actor, &req.result, &child_ids, now)?;
        let answer = Completed {
            item_id: item.id.to_string(),
            state: ItemState::Done,
            ledger_seq: 0,
            replayed: false,
            trace: None,
        };
        let at = batch.entries.len();
        batch.entries.push(entry);
        batch
            .entries
            .extend(children.iter().map(|c| c.entry.clone()));
        batch.children.extend(children);
        batch.save(item.id, Some(req.result));
        *batch.completed.entry(item.kind).or_default() += 1;
        Ok(Pending::Sealed {
            lease_id,
            digest,
            answer,
            entry: at,
        })
    }
}

/// The writes of a batch of completions, gathered before any is sent.
#[derive(Default)]
struct Batch {
    /// Items to write back, once each, in first-touched order, with the result if completed.
    saved: Vec<(ItemId, Option<Value>)>,
    children: Vec<NewItem>,
    entries: Vec<muster_ledger::SealedEntry>,
    /// Leases that ended without a sealed answer (late results).
    finished: Vec<(LeaseId, LeaseOutcome)>,
    completed: HashMap<Kind, u64>,
    late: HashMap<Kind, u64>,
    /// Items failed because their last lease was used after its final grace.
    expired: HashMap<Kind, u64>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.saved.is_empty()
    }

    fn save(&mut self, id: ItemId, result: Option<Value>) {
        match self.saved.iter_mut().find(|(s, _)| *s == id) {
            Some(slot) => {
                if result.is_some() {
                    slot.1 = result;
                }
            }
            None => self.saved.push((id, result)),
        }
    }
}

/// A completion's answer, waiting for its ledger sequence number when it wrote anything.
enum Pending {
    Done(Completed),
    Sealed {
        lease_id: LeaseId,
        digest: [u8; 32],
        answer: Completed,
        /// Index of its `completed` entry in the batch's ledger entries.
        entry: usize,
    },
}

impl Pending {
    /// The answer with the item it is about, for the call's item span.
    fn traced(mut self, trace: Option<ItemTrace>) -> Pending {
        match &mut self {
            Pending::Done(answer) | Pending::Sealed { answer, .. } => answer.trace = trace,
        }
        self
    }

    fn finish(self) -> Completed {
        match self {
            Pending::Done(answer) | Pending::Sealed { answer, .. } => answer,
        }
    }
}
