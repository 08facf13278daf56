//! Optional bearer-token authentication: with a token configured, a request without it
//! (or with another) is refused with 401 and the refusal is logged.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::model::ErrorResponse;

/// The token requests must carry.
#[derive(Clone)]
pub(crate) struct RequiredToken(pub(crate) std::sync::Arc<str>);

/// Compares in time independent of where the strings differ, so that the token cannot be
/// guessed byte by byte from response times.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) async fn require_token(
    State(token): State<RequiredToken>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(presented) if same(presented.as_bytes(), token.0.as_bytes()) => {
            next.run(request).await
        }
        _ => {
            tracing::warn!(
                method = %request.method(),
                path = %request.uri().path(),
                reason = if presented.is_some() { "wrong token" } else { "no token" },
                "REST request refused"
            );
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                Json(ErrorResponse {
                    errors: vec![
                        "authentication required: send `Authorization: Bearer <token>` with the token of `rest.authentication.token`".into(),
                    ],
                }),
            )
                .into_response()
        }
    }
}
