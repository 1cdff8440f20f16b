use super::*;

fn mapped(e: AppError) -> (u16, &'static str) {
    let a = ApiError::from(e);
    (a.status().as_u16(), a.code.as_str())
}

#[test]
fn every_use_case_error_has_the_contracts_status_and_code() {
    assert_eq!(
        mapped(AppError::BadRequest("x".into())),
        (400, "E_BAD_REQUEST")
    );
    assert_eq!(
        mapped(AppError::Forbidden("x".into())),
        (403, "E_FORBIDDEN")
    );
    assert_eq!(mapped(AppError::NotFound("x".into())), (404, "E_NOT_FOUND"));
    assert_eq!(mapped(AppError::LeaseLost), (409, "E_LEASE_LOST"));
    assert_eq!(
        mapped(AppError::TimedOut("x".into())),
        (409, "E_LEASE_LOST")
    );
    assert_eq!(mapped(AppError::Conflict("x".into())), (409, "E_CONFLICT"));
    assert_eq!(mapped(AppError::Route("x".into())), (422, "E_ROUTE"));
    assert_eq!(mapped(AppError::Target("x".into())), (422, "E_TARGET"));
    assert_eq!(mapped(AppError::Pow("x".into())), (400, "E_POW"));
    assert_eq!(
        mapped(AppError::RateLimited {
            retry_after_secs: 5
        }),
        (429, "E_RATE_LIMITED")
    );
    assert_eq!(mapped(AppError::Unavailable), (503, "E_UNAVAILABLE"));
    assert_eq!(mapped(AppError::Internal("x".into())), (500, "E_INTERNAL"));
}

#[test]
fn a_method_the_route_does_not_have_is_405_with_the_code_of_a_bad_request() {
    assert_eq!(
        ErrorCode::MethodNotAllowed.answer(),
        (StatusCode::METHOD_NOT_ALLOWED, "E_BAD_REQUEST")
    );
}

#[test]
fn internal_details_are_not_shown_to_the_caller() {
    let a = ApiError::from(AppError::Internal(
        "relation core.items: secret detail".into(),
    ));
    assert_eq!(a.message, "internal error");
}

#[test]
fn internal_details_are_kept_for_the_log() {
    let a = ApiError::from(AppError::Internal(
        "relation core.items: secret detail".into(),
    ));
    assert_eq!(
        a.detail.as_deref(),
        Some("relation core.items: secret detail")
    );
}

#[test]
fn an_internal_detail_rides_on_the_response_for_the_middleware_and_not_in_its_body() {
    let res = ApiError::internal("the pool is gone").into_response();
    assert_eq!(
        res.extensions()
            .get::<InternalDetail>()
            .map(|d| d.0.as_str()),
        Some("the pool is gone")
    );
}

#[test]
fn a_rate_limited_answer_carries_its_retry_after() {
    let a = ApiError::from(AppError::RateLimited {
        retry_after_secs: 7,
    });
    assert_eq!(a.retry_after, Some(7));
}
