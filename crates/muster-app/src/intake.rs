//! Anonymous edit intake: five layers, cheapest first, so that spam dies before it costs a
//! database round trip.
//!
//! 1. caller is Conn and `X-Client-IP` is one address (else 400) — no I/O;
//! 2. proof of work: signature, expiry and work checked statelessly — no I/O (the MAC key is
//!    cached after its first load; it never changes);
//! 3. schema: target in the ownership map (422 `E_TARGET`), body to plain text — no I/O;
//! 4. in ONE transaction: the day's salt, the salted client hash counted against the daily cap
//!    (429), the challenge spent (400 if it was spent before), the proposal stored as
//!    `pending_approval` with its ledger row. A refusal at any step rolls everything back: an
//!    over-limit client burns no challenge, a spent challenge costs no quota.
//! 5. honeypot: a filled `website` is judged last, inside that transaction, so that its answer
//!    is an accepted proposal's in every way: it needs a valid proof of work (else the same
//!    `E_POW`), a known target, room under the daily cap and an unspent challenge, which it
//!    spends and counts like an accepted one — only nothing is stored or published, and the
//!    202 carries a fresh id that names nothing.
//!
//! The raw IP is used only to compute the salted hash and is never stored, logged or published.

use std::sync::{Arc, RwLock};

use muster_antispam::{self as spam, ChallengeKey, DailySalt, IntakeError, OwnershipMap};
use muster_domain::Principal;
use muster_domain::edit::{Decided, Decision, DecisionError, Edit, EditId, EditState};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use crate::AppError;
use crate::ports::{Clock, Ids, IntakeLog, Logbook};
use crate::signal::WorkSignal;
use crate::views::EditView;

/// Refusals per layer, for metrics.
#[derive(Debug, Default)]
pub struct IntakeStats {
    pub accepted: std::sync::atomic::AtomicU64,
    pub honeypot: std::sync::atomic::AtomicU64,
    pub pow: std::sync::atomic::AtomicU64,
    pub target: std::sync::atomic::AtomicU64,
    pub rate_limited: std::sync::atomic::AtomicU64,
    pub spent: std::sync::atomic::AtomicU64,
}

fn bump(c: &std::sync::atomic::AtomicU64) {
    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Settings of the intake.
#[derive(Debug, Clone)]
pub struct IntakeSettings {
    pub difficulty: u8,
    pub daily_limit: u32,
}

impl Default for IntakeSettings {
    fn default() -> Self {
        IntakeSettings {
            difficulty: spam::DEFAULT_DIFFICULTY,
            daily_limit: spam::ip::DEFAULT_DAILY_LIMIT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChallengeView {
    pub challenge: String,
    pub difficulty: u8,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// A submission as Conn sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub target: String,
    pub body: String,
    pub website: String,
    pub challenge: String,
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Submitted {
    pub edit_id: String,
    pub state: EditState,
}

/// The ownership map currently in force (reloaded by the binary when its file changes).
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    map: Arc<RwLock<Option<Arc<OwnershipMap>>>>,
}

impl Ownership {
    pub fn set(&self, map: OwnershipMap) {
        *self.map.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(map));
    }

    pub fn current(&self) -> Option<Arc<OwnershipMap>> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What [`Intake::new`] is built from: its ports, its settings and the ownership map.
#[derive(Clone)]
pub struct IntakeParts {
    pub logbook: Arc<dyn Logbook>,
    pub records: Arc<dyn IntakeLog>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn Ids>,
    pub signal: WorkSignal,
    pub settings: IntakeSettings,
    pub ownership: Ownership,
}

/// The edit intake use cases.
#[derive(Clone)]
pub struct Intake {
    parts: IntakeParts,
    key: Arc<OnceCell<ChallengeKey>>,
    stats: Arc<IntakeStats>,
}

debug_showing!(Intake, settings = parts.settings);

/// Seconds from `now` to the next UTC midnight (when the daily cap resets).
fn until_midnight(now: OffsetDateTime) -> u64 {
    let next = now.date().next_day().map(|d| d.midnight().assume_utc());
    next.map(|n| (n - now).whole_seconds().max(1) as u64)
        .unwrap_or(86_400)
}

impl Intake {
    pub fn new(parts: IntakeParts) -> Self {
        Intake {
            parts,
            key: Arc::new(OnceCell::new()),
            stats: Arc::new(IntakeStats::default()),
        }
    }

    pub fn stats(&self) -> &IntakeStats {
        &self.stats
    }

    pub fn ownership(&self) -> &Ownership {
        &self.parts.ownership
    }

    /// The MAC key shared by every replica (loaded once; it never changes).
    pub async fn key(&self) -> Result<&ChallengeKey, AppError> {
        self.key
            .get_or_try_init(|| async {
                let bytes = self
                    .parts
                    .records
                    .pow_key(self.parts.ids.random32())
                    .await?;
                Ok::<_, AppError>(ChallengeKey::from_bytes(bytes))
            })
            .await
    }

    fn require_conn(actor: Principal) -> Result<(), AppError> {
        if actor == Principal::Conn {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!(
                "{actor} may not submit edits; only Conn forwards them"
            )))
        }
    }

    /// `POST /v1/edits/challenge`.
    pub async fn challenge(&self, actor: Principal) -> Result<ChallengeView, AppError> {
        Self::require_conn(actor)?;
        let key = self.key().await?;
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&self.parts.ids.random32()[..16]);
        let c = spam::pow::issue(
            key,
            self.parts.clock.now(),
            self.parts.settings.difficulty,
            seed,
        );
        Ok(ChallengeView {
            challenge: c.token,
            difficulty: c.difficulty,
            expires_at: c.expires_at,
        })
    }

    /// `POST /v1/edits`.
    pub async fn submit(
        &self,
        actor: Principal,
        client_ip: Option<&str>,
        s: Submission,
    ) -> Result<Submitted, AppError> {
        Self::require_conn(actor)?;
        let ip = client_ip
            .ok_or_else(|| AppError::BadRequest("the X-Client-IP header is required".into()))
            .and_then(|h| {
                spam::parse_client_ip(h).map_err(|e| AppError::from(IntakeError::from(e)))
            })?;
        // 2. Proof of work, statelessly.
        let now = self.parts.clock.now();
        let key = self.key().await?;
        let verified = spam::pow::verify(key, &s.challenge, &s.nonce, now).map_err(|e| {
            bump(&self.stats.pow);
            AppError::from(IntakeError::from(e))
        })?;
        // 3. Schema.
        let map = self.parts.ownership.current();
        let target = map
            .as_deref()
            .and_then(|m| m.get(&s.target))
            .ok_or_else(|| {
                bump(&self.stats.target);
                AppError::Target(format!("no target {:?} in the ownership map", s.target))
            })?;
        let owner = target.owner.clone();
        let body = spam::to_plain_text(&s.body);
        if body.trim().is_empty() {
            return Err(AppError::BadRequest(
                "the body is empty once markup is removed".into(),
            ));
        }
        spam::check_request_size(body.len())?;
        // 4. Cap, spend, store: one transaction.
        let day = spam::utc_day(now);
        let mut tx = self.parts.logbook.begin().await?;
        let salt = DailySalt::from_bytes(tx.day_salt(day, self.parts.ids.random32()).await?);
        let client = spam::client_hash(&salt, ip);
        if !tx
            .count_submission(day, client, self.parts.settings.daily_limit)
            .await?
        {
            bump(&self.stats.rate_limited);
            return Err(AppError::RateLimited {
                retry_after_secs: until_midnight(now),
            });
        }
        if !tx
            .spend_challenge(verified.spend_key, verified.expires_at)
            .await?
        {
            bump(&self.stats.spent);
            return Err(AppError::Pow("this challenge was already used".into()));
        }
        // 5. Honeypot: the cap and the spend stand, as for an accepted proposal; nothing
        // else is stored or published.
        if spam::is_bot(&s.website) {
            tx.commit().await?;
            bump(&self.stats.honeypot);
            return Ok(Submitted {
                edit_id: self.parts.ids.edit_id().to_string(),
                state: EditState::PendingApproval,
            });
        }
        let (edit, entry) = Edit::submit(
            self.parts.ids.edit_id(),
            &s.target,
            &owner,
            &body,
            actor,
            now,
        );
        tx.insert_edit(&edit, &body, now).await?;
        tx.append(&[entry]).await?;
        tx.commit().await?;
        self.parts.signal.ledger_changed();
        bump(&self.stats.accepted);
        Ok(Submitted {
            edit_id: edit.id.to_string(),
            state: edit.state,
        })
    }

    /// `GET /v1/edits?state=…`: Countersign and operators.
    pub async fn list(
        &self,
        actor: Principal,
        state: EditState,
        after: Option<EditId>,
        limit: i64,
    ) -> Result<Vec<EditView>, AppError> {
        if !matches!(
            actor,
            Principal::Operator | Principal::Worker(muster_domain::Kind::Countersign)
        ) {
            return Err(AppError::Forbidden(format!(
                "{actor} may not read edit proposals"
            )));
        }
        if !(1..=500).contains(&limit) {
            return Err(AppError::BadRequest("limit must be 1 to 500".into()));
        }
        Ok(self.parts.records.list_edits(state, after, limit).await?)
    }

    /// `POST /v1/edits/{id}/decision`: Countersign, for the target's owner.
    pub async fn decide(
        &self,
        actor: Principal,
        id: EditId,
        decision: Decision,
        owner: &str,
    ) -> Result<Submitted, AppError> {
        if actor != Principal::Worker(muster_domain::Kind::Countersign) {
            return Err(AppError::Forbidden(format!(
                "{actor} may not decide on edits"
            )));
        }
        let now = self.parts.clock.now();
        let mut tx = self.parts.logbook.begin().await?;
        let mut edit = tx
            .lock_edit(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no edit {id}")))?;
        // The owner now in force; the one recorded at submission if the target was removed.
        let current = self
            .parts
            .ownership
            .current()
            .and_then(|m| m.owner_of(&edit.target).map(str::to_owned))
            .unwrap_or_else(|| edit.owner.clone());
        match edit.decide(decision, owner, &current, actor, now) {
            Ok(Decided::Now(entry)) => {
                tx.save_edit(&edit, now).await?;
                tx.append(&[*entry]).await?;
                tx.commit().await?;
                self.parts.signal.ledger_changed();
            }
            Ok(Decided::Already) => {}
            Err(DecisionError::NotOwner) => {
                return Err(AppError::Forbidden(DecisionError::NotOwner.to_string()));
            }
            Err(e @ DecisionError::AlreadyDecided(_)) => {
                return Err(AppError::Conflict(e.to_string()));
            }
        }
        Ok(Submitted {
            edit_id: id.to_string(),
            state: edit.state,
        })
    }

    /// Deletes yesterday's salts and counters and expired challenges.
    pub async fn purge(&self) -> Result<u64, AppError> {
        let now = self.parts.clock.now();
        Ok(self
            .parts
            .records
            .purge_intake(spam::utc_day(now), now)
            .await?)
    }
}

#[cfg(test)]
mod tests;
