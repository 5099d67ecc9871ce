//! How the HTTP API says "no": one JSON error body (`{"error": "…"}`, sometimes with extra
//! fields such as the list of valid names), the status codes engine errors map to, and the
//! extractors that turn axum's rejections (malformed JSON, wrong types, missing fields, bad
//! query strings) into that body.
//!
//! Must not: answer a client's mistake with a 5xx. Only real faults (the store failing, a bug)
//! are 500; a database out of reach is 503 (try again).

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use mai_core::store::StoreError;
use mai_engine::EngineError;

use crate::inbound::InboundError;

/// An error answer: a status and a message that says what is wrong and what to do.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Extra fields next to `error` (e.g. `tools` for an unknown tool).
    pub extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            extra: Map::new(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {message}"),
        )
    }

    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, error = %self.message, "HTTP API fault");
        }
        let mut body = Map::new();
        body.insert("error".into(), Value::String(self.message));
        body.extend(self.extra);
        let mut response = (self.status, Json(Value::Object(body))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mai-agent\""),
            );
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            EngineError::NotFound(_)
            | EngineError::NoSuchTask(_)
            | EngineError::Store(StoreError::NotFound(_)) => StatusCode::NOT_FOUND,
            EngineError::Ambiguous { .. }
            | EngineError::ShortReference(_)
            | EngineError::Invalid(_)
            | EngineError::InvalidCron { .. } => StatusCode::BAD_REQUEST,
            EngineError::WrongState { .. } | EngineError::Transition(_) => StatusCode::CONFLICT,
            EngineError::Stopping => StatusCode::SERVICE_UNAVAILABLE,
            // The database is out of reach: nothing was done, and the same request may pass
            // once it is back (the message says so).
            EngineError::Store(error) if error.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::LimitReached(_) => StatusCode::TOO_MANY_REQUESTS,
            EngineError::Store(_) | EngineError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

impl From<InboundError> for ApiError {
    fn from(error: InboundError) -> Self {
        match error {
            InboundError::Invalid(message) => ApiError::bad_request(message),
            InboundError::Engine(error) => error.into(),
            InboundError::Host(error) => ApiError::internal(error),
        }
    }
}

// axum's own rejection texts already name the field (it deserializes through
// serde_path_to_error) and its statuses are the right 4xx: 400 syntax, 422 wrong data,
// 415 no JSON content type, 413 too large.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        let status = if rejection.status().is_server_error() {
            // A route/extractor mismatch is our bug, but the answer stays about the path.
            StatusCode::BAD_REQUEST
        } else {
            rejection.status()
        };
        ApiError::new(status, rejection.body_text())
    }
}

/// A JSON request body; rejections become [`ApiError`]s.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct JsonBody<T>(pub T);

/// Query parameters; rejections become [`ApiError`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct QueryParams<T>(pub T);

/// Path parameters; rejections become [`ApiError`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct PathParams<T>(pub T);

/// `404` for a path no route serves.
pub(crate) async fn no_such_route() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such endpoint; GET /openapi.json lists every endpoint",
    )
}

/// `405` for a known path with the wrong method.
pub(crate) async fn wrong_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint does not take that method; GET /openapi.json lists every endpoint",
    )
}

/// A JSON value of a serializable result, or a 500 (serializing our own types cannot fail
/// unless there is a bug).
pub(crate) fn to_json(value: &impl serde::Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(ApiError::internal)
}
