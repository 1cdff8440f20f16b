//! A long answer (the live feed) outlives the token that opened it unless it is checked again:
//! [`until_token_invalid`] asks the authenticator again every interval (with TokenReview, the
//! cache's time to live, so each check is a fresh review; while the API server gives no answer,
//! the last positive one serves up to its stale limit, then the check fails) and ends the
//! answer's body when the token no longer resolves to the same principal. An authority that
//! cannot answer does not end it: the next check asks again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::Response;
use muster_app::auth::{AuthError, Authenticator};
use muster_domain::Principal;

use crate::watched_body::{Watch, watched};

/// How often a live feed's token is checked again: the TokenReview cache's time to live, so
/// that each check after the first is a fresh review.
pub(crate) const RECHECK: Duration = Duration::from_secs(30);

type Check = Pin<Box<dyn Future<Output = Result<Option<Principal>, AuthError>> + Send>>;

/// `res` with its body ended once `token` no longer resolves to `principal`, checked every
/// `every`.
pub(crate) fn until_token_invalid(
    res: Response,
    auth: Arc<dyn Authenticator>,
    token: String,
    principal: Principal,
    every: Duration,
) -> Response {
    res.map(|inner| {
        let recheck = Recheck {
            auth,
            token: Arc::from(token),
            principal,
            every,
            timer: Box::pin(tokio::time::sleep(every)),
            check: None,
        };
        watched(inner, recheck)
    })
}

struct Recheck {
    auth: Arc<dyn Authenticator>,
    token: Arc<str>,
    principal: Principal,
    every: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    check: Option<Check>,
}

impl Recheck {
    /// Whether the token was found no longer valid.
    fn revoked(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if let Some(check) = self.check.as_mut() {
                let Poll::Ready(answer) = check.as_mut().poll(cx) else {
                    return false;
                };
                self.check = None;
                match answer {
                    Ok(Some(p)) if p == self.principal => {}
                    Ok(_) => {
                        tracing::info!(principal = %self.principal, "a live feed's token is no longer valid: the stream ends");
                        return true;
                    }
                    Err(AuthError::Unavailable) => {
                        tracing::debug!("a live feed's token could not be checked again; next time")
                    }
                }
                let next = tokio::time::Instant::now() + self.every;
                self.timer.as_mut().reset(next);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let (auth, token) = (Arc::clone(&self.auth), Arc::clone(&self.token));
            self.check = Some(Box::pin(async move { auth.authenticate(&token).await }));
        }
    }
}

impl Watch for Recheck {
    fn ends_body(&mut self, cx: &mut Context<'_>) -> bool {
        self.revoked(cx)
    }
}

#[cfg(test)]
mod tests;
