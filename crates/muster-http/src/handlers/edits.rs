//! The anonymous edit intake routes (Conn) and the review gate (Countersign).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use muster_app::intake::{ChallengeView, Submission, Submitted};
use muster_app::views::EditList;
use muster_domain::edit::{Decision, EditId, EditState};
use serde::Deserialize;

use super::{Answer, Json};
use crate::error::ApiError;
use crate::extract::{Caller, InPath, InQuery, JsonBody, read_limited};
use crate::state::AppState;

/// The contract's limit on an edit submission, enforced while the body is read.
pub const EDIT_BODY_LIMIT: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoBody {}

pub(crate) async fn challenge(
    State(s): State<AppState>,
    Caller(p): Caller,
    body: axum::body::Body,
) -> Answer<ChallengeView> {
    // The request carries nothing; an empty body or `{}` is fine, anything else is refused.
    let body = read_limited(body, EDIT_BODY_LIMIT, s.body_budget.read_deadline()).await?;
    if !body.is_empty() {
        serde_json::from_slice::<NoBody>(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    }
    Ok(Json(s.intake.challenge(p).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitBody {
    target: String,
    body: String,
    #[serde(default)]
    website: String,
    pow: PowBody,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PowBody {
    challenge: String,
    nonce: String,
}

pub(crate) async fn submit(
    State(s): State<AppState>,
    Caller(p): Caller,
    headers: HeaderMap,
    JsonBody(b): JsonBody<SubmitBody, EDIT_BODY_LIMIT>,
) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    let ip = headers
        .get("x-client-ip")
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    let sub = Submission {
        target: b.target,
        body: b.body,
        website: b.website,
        challenge: b.pow.challenge,
        nonce: b.pow.nonce,
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(s.intake.submit(p, ip, sub).await?),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    state: EditState,
    #[serde(default = "fifty")]
    limit: i64,
    #[serde(default)]
    after: Option<uuid::Uuid>,
}

fn fifty() -> i64 {
    50
}

pub(crate) async fn list(
    State(s): State<AppState>,
    Caller(p): Caller,
    InQuery(q): InQuery<ListQuery>,
) -> Answer<EditList> {
    let edits = s
        .intake
        .list(p, q.state, q.after.map(EditId), q.limit)
        .await?;
    Ok(Json(EditList { edits }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    decision: Decision,
    owner: String,
}

pub(crate) async fn decide(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<EditId>,
    JsonBody(b): JsonBody<DecisionBody, EDIT_BODY_LIMIT>,
) -> Answer<Submitted> {
    Ok(Json(s.intake.decide(p, id, b.decision, &b.owner).await?))
}
