//! Durable delivery: every outcome is spooled (fsync + rename) before it is sent, sent until
//! answered, and unspooled only after an acknowledgement or a final answer.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::spool::{self, Action, SpoolEntry};
use crate::{Ack, ClientError, Completion, Lease, MAX_BATCH, NextStep, WorkerClient, parse};

/// What [`WorkerClient::redeliver_spool`] did with one spool file.
#[derive(Debug)]
pub struct Redelivery {
    pub file: PathBuf,
    pub outcome: Result<Ack, ClientError>,
}

impl WorkerClient {
    /// Completes the lease with `result` and the `next` pipeline steps (spooled, then delivered
    /// until acknowledged or finally refused).
    pub async fn complete(
        &self,
        lease: &Lease,
        result: Value,
        next: Vec<NextStep>,
    ) -> Result<Ack, ClientError> {
        self.complete_spooled(lease, result, next, false).await
    }

    /// [`complete`](Self::complete), and in the same round trip and transaction a new lease
    /// for this worker: [`Ack::next_lease`] (`None` when nothing was leasable at that moment;
    /// fall back to [`lease`](Self::lease)). Spooled like `complete`; a delivery retried
    /// after a lost answer leases afresh, and a redelivery from the spool leases nothing.
    pub async fn complete_and_lease(
        &self,
        lease: &Lease,
        result: Value,
        next: Vec<NextStep>,
    ) -> Result<Ack, ClientError> {
        let mut ack = self.complete_spooled(lease, result, next, true).await?;
        // The completion is acknowledged whatever came with it; a next lease whose id could
        // not name a spool file is left to expire.
        if let Some(next) = &ack.next_lease
            && spool::check_lease_id(&next.lease_id).is_err()
        {
            tracing::warn!(lease_id = ?next.lease_id, "next lease with an unusable id dropped");
            ack.next_lease = None;
        }
        Ok(ack)
    }

    /// The completion of `lease`, spooled and delivered; with a new lease when `lease_next`.
    async fn complete_spooled(
        &self,
        lease: &Lease,
        result: Value,
        next: Vec<NextStep>,
        lease_next: bool,
    ) -> Result<Ack, ClientError> {
        let body = Completion::new(lease, result, next).body();
        self.spool_and_deliver(lease, Action::Complete, body, lease_next)
            .await
    }

    /// Completes many leases in one request and one transaction (`POST /v1/completions`,
    /// 1 to [`MAX_BATCH`] entries, at most 1 MiB in all). Every entry is spooled first as
    /// the single `complete` of its lease (so [`redeliver_spool`](Self::redeliver_spool)
    /// delivers it alone if this process dies), then the batch is sent until the server
    /// answers it, with the same retries as single deliveries.
    ///
    /// `Ok` holds one answer per entry, in order, each the answer the single call would have
    /// got (`LeaseLost`, `Conflict`, `Rejected` are final and unspooled like theirs). An entry
    /// answered with a non-final error (the server's `500` for the one entry it could not
    /// write) is not retried here and stays spooled: [`ClientError::is_final`] tells which;
    /// [`redeliver_spool`](Self::redeliver_spool) sends it again alone. `Err` is the whole
    /// batch's failure; its entries then stay spooled — a refusal of the batch as a whole
    /// (`413 E_TOO_LARGE`: split it) says nothing against any one completion. A lease named
    /// twice is refused before anything is written (`InvalidArgument`).
    pub async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<Ack, ClientError>>, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            results: Vec<Value>,
        }
        if !(1..=MAX_BATCH).contains(&completions.len()) {
            return Err(ClientError::InvalidArgument(format!(
                "a batch holds 1 to {MAX_BATCH} completions, not {}",
                completions.len()
            )));
        }
        // One spool file per lease: a lease twice would share it (and the server applies only
        // the first of the two).
        let mut seen = std::collections::HashSet::with_capacity(completions.len());
        if let Some(twice) = completions.iter().find(|c| !seen.insert(&c.lease_id)) {
            return Err(ClientError::InvalidArgument(format!(
                "lease {} appears more than once in the batch",
                twice.lease_id
            )));
        }
        let entries = completions
            .iter()
            .map(|c| {
                spool::check_lease_id(&c.lease_id)?;
                Ok(SpoolEntry {
                    lease_id: c.lease_id.clone(),
                    action: Action::Complete,
                    body: c.body(),
                    traceparent: c.traceparent.clone(),
                })
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        let dir = self.inner.spool.clone();
        let files = tokio::task::spawn_blocking(move || spool::write_all(&dir, &entries))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        let batch: Vec<Value> = completions.iter().map(Completion::batch_entry).collect();
        let body = json!({ "completions": batch }).to_string().into_bytes();
        let answer: Answer = self
            .send_until_answered(
                "/v1/completions",
                body,
                "complete_many",
                batch_traceparent(completions),
            )
            .await?;
        if answer.results.len() != completions.len() {
            return Err(ClientError::BadResponse {
                status: 200,
                detail: format!(
                    "{} results for {} completions",
                    answer.results.len(),
                    completions.len()
                ),
            });
        }
        let mut done = Vec::new();
        let mut acks = Vec::with_capacity(completions.len());
        for ((result, file), c) in answer.results.into_iter().zip(files).zip(completions) {
            let ack = entry_answer(result, &c.lease_id);
            match &ack {
                Ok(_) => done.push(file),
                Err(e) if e.is_final() => {
                    tracing::warn!(lease_id = %c.lease_id, code = e.code(), "completion refused for good: {e}");
                    done.push(file);
                }
                Err(_) => {}
            }
            acks.push(ack);
        }
        self.unspool_all(done).await;
        Ok(acks)
    }

    /// Fails the lease (spooled, then delivered); `retryable` re-queues with backoff.
    pub async fn fail(
        &self,
        lease: &Lease,
        error_code: &str,
        message: &str,
        retryable: bool,
    ) -> Result<Ack, ClientError> {
        let body =
            json!({"error": {"code": error_code, "message": message}, "retryable": retryable});
        self.spool_and_deliver(lease, Action::Fail, body, false)
            .await
    }

    /// Parks the item: this worker (`digest`, `sha256:…`) cannot handle its layout.
    pub async fn needs_subtool(
        &self,
        lease: &Lease,
        digest: &str,
        signature: &str,
        detail: Value,
    ) -> Result<Ack, ClientError> {
        let body =
            json!({"worker_digest": digest, "layout": {"signature": signature, "detail": detail}});
        self.spool_and_deliver(lease, Action::NeedsSubtool, body, false)
            .await
    }

    /// Delivers every spool file, oldest first; one [`Redelivery`] per file. Fails only when the
    /// spool directory cannot be listed.
    pub async fn redeliver_spool(&self) -> Result<Vec<Redelivery>, ClientError> {
        self.redeliver_spool_except(|_| false).await
    }

    /// [`redeliver_spool`](Self::redeliver_spool), skipping the files of the leases for which
    /// `busy(lease_id)` is true (their delivery is under way elsewhere); listed before asked.
    pub(crate) async fn redeliver_spool_except(
        &self,
        busy: impl Fn(&str) -> bool,
    ) -> Result<Vec<Redelivery>, ClientError> {
        let dir = self.inner.spool.clone();
        let mut files = tokio::task::spawn_blocking(move || spool::list(&dir))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        files.retain(|file| {
            let lease_id = file
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('.').next())
                .unwrap_or_default();
            !busy(lease_id)
        });
        let mut done = Vec::with_capacity(files.len());
        for file in files {
            let path = file.clone();
            let entry = tokio::task::spawn_blocking(move || spool::read(&path))
                .await
                .map_err(|e| ClientError::Transport(e.to_string()));
            let outcome = match entry {
                Ok(Ok(entry)) => self.deliver(&file, &entry, false).await,
                Ok(Err(e)) | Err(e) => Err(e),
            };
            done.push(Redelivery { file, outcome });
        }
        Ok(done)
    }

    async fn spool_and_deliver(
        &self,
        lease: &Lease,
        action: Action,
        body: Value,
        lease_next: bool,
    ) -> Result<Ack, ClientError> {
        spool::check_lease_id(&lease.lease_id)?;
        let entry = SpoolEntry {
            lease_id: lease.lease_id.clone(),
            action,
            body,
            traceparent: lease.sent_traceparent().map(str::to_owned),
        };
        let dir = self.inner.spool.clone();
        let to_write = entry.clone();
        let file = tokio::task::spawn_blocking(move || spool::write(&dir, &to_write))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        self.deliver(&file, &entry, lease_next).await
    }

    /// Sends a spooled delivery until acknowledged or finally refused; removes the spool file
    /// then (and only then). With `lease_next` the request also asks for the next lease (not
    /// part of what is spooled: a redelivery only completes).
    async fn deliver(
        &self,
        file: &Path,
        entry: &SpoolEntry,
        lease_next: bool,
    ) -> Result<Ack, ClientError> {
        let path = format!("/v1/leases/{}/{}", entry.lease_id, entry.action.as_str());
        let body = if lease_next {
            let mut body = entry.body.clone();
            body["lease_next"] = json!(true);
            body
        } else {
            entry.body.clone()
        };
        let outcome = self
            .send_until_answered::<Ack>(
                &path,
                body.to_string().into_bytes(),
                entry.action.as_str(),
                entry.traceparent.as_deref(),
            )
            .await;
        match &outcome {
            Ok(_) => self.unspool(file).await,
            Err(e) if e.is_final() => {
                tracing::warn!(lease_id = %entry.lease_id, action = entry.action.as_str(), code = e.code(), "delivery refused for good: {e}");
                self.unspool(file).await;
            }
            Err(_) => {}
        }
        outcome
    }

    /// POSTs `body` (with `traceparent` when given) until the server answers 200 with a `T`
    /// (`Ok`), refuses it for good or answers something the contract does not (`Err`), or the
    /// retry budget runs out (`Err(Undelivered)`). Retryable failures wait per the
    /// [`RetryPolicy`].
    async fn send_until_answered<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        what: &str,
        traceparent: Option<&str>,
    ) -> Result<T, ClientError> {
        let policy = &self.inner.retry;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let outcome = match self
                .post(path, body.clone(), self.inner.request_timeout, traceparent)
                .await
            {
                Ok((200, bytes, _)) => parse::<T>(200, &bytes),
                Ok((status, bytes, retry_after)) => {
                    Err(ClientError::from_answer(status, &bytes, retry_after))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.is_retryable() => {
                    if policy.max_attempts.is_some_and(|max| attempt >= max) {
                        return Err(ClientError::Undelivered {
                            attempts: attempt,
                            last: Box::new(e),
                        });
                    }
                    let delay = policy.delay_after(attempt, &e);
                    tracing::info!(
                        path,
                        what,
                        code = e.code(),
                        attempt,
                        ?delay,
                        "delivery failed, retrying: {e}"
                    );
                    tokio::time::sleep(delay).await;
                }
                answered => return answered,
            }
        }
    }

    /// Removes a spool file after an answer; a failure is logged (the redelivery it causes
    /// is answered `replayed` or final, never a duplicate).
    async fn unspool(&self, file: &Path) {
        self.unspool_all(vec![file.to_owned()]).await;
    }

    /// [`unspool`](Self::unspool) for many files, with one directory fsync.
    async fn unspool_all(&self, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        let removed = tokio::task::spawn_blocking(move || spool::remove_all(&files)).await;
        if let Ok(Err(e)) | Err(e) = removed.map_err(|e| ClientError::Transport(e.to_string())) {
            tracing::warn!("could not remove delivered spool files: {e}");
        }
    }
}

/// The `traceparent` of a batch: the one its completions' leases all send, when they send the
/// same one (a batch within one span); none otherwise, since one header cannot name several
/// parents (the server then puts each entry's span in its item's trace on its own).
fn batch_traceparent(completions: &[Completion]) -> Option<&str> {
    let first = completions.first()?.traceparent.as_deref()?;
    completions
        .iter()
        .all(|c| c.traceparent.as_deref() == Some(first))
        .then_some(first)
}

/// One entry of a `POST /v1/completions` answer: `status` 200 with the `complete` answer's
/// fields, or the single call's error status and `error` object.
fn entry_answer(entry: Value, lease_id: &str) -> Result<Ack, ClientError> {
    let bad = |detail: String| ClientError::BadResponse {
        status: 200,
        detail: format!("completion of lease {lease_id}: {detail}"),
    };
    if entry.get("lease_id").and_then(Value::as_str) != Some(lease_id) {
        return Err(bad(format!("answered for {:?}", entry.get("lease_id"))));
    }
    let status = entry
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| bad("no status".into()))?;
    if status == 200 {
        serde_json::from_value(entry).map_err(|e| bad(e.to_string()))
    } else {
        Err(ClientError::from_answer(
            status,
            entry.to_string().as_bytes(),
            None,
        ))
    }
}
