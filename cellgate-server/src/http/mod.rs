//! The HTTP listener: ratelimit's `POST /json` and `GET /healthcheck`, plus `GET /metrics`
//! (Prometheus text) and `GET /rlconfig` (the configuration in force); and the metrics alone
//! on a listener of their own (ratelimit's `USE_PROMETHEUS`).

mod json;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::server::service::Service;
use json::{JsonRequest, JsonResponse};

/// The router over `service`: bodies of at most `max_body_bytes`, requests (body included)
/// answered within `timeout` or refused with 408.
pub(crate) fn router(service: Arc<Service>, max_body_bytes: usize, timeout: Duration) -> Router {
    Router::new()
        .route("/json", post(json_endpoint))
        .route("/healthcheck", get(health))
        .route("/metrics", get(metrics))
        .route("/rlconfig", get(rlconfig))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            within(timeout, req, next)
        }))
        .with_state(service)
}

/// ratelimit's Prometheus listener (`USE_PROMETHEUS`): the metrics alone, at `path` (which
/// must be a route: `/` then letters, digits and `/-._~`, checked by the caller).
pub(crate) fn metrics_router(service: Arc<Service>, path: &str, timeout: Duration) -> Router {
    Router::new()
        .route(path, get(metrics))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            within(timeout, req, next)
        }))
        .with_state(service)
}

async fn within(timeout: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request timed out\n").into_response(),
    }
}

async fn json_endpoint(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let req = match serde_json::from_slice::<JsonRequest>(&body)
        .map_err(|e| e.to_string())
        .and_then(JsonRequest::into_api)
    {
        Ok(r) => r,
        Err(e) => {
            service.metrics.request_error();
            return bad_request(format!("invalid request: {e}"));
        }
    };
    let answer = match service.decide(&req).await {
        Ok(a) => a,
        Err(e) => return bad_request(e.to_string()),
    };
    let (body, over) = JsonResponse::new(answer);
    let status = if over {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    (status, axum::Json(body)).into_response()
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response()
}

/// ratelimit's `OK`; in fleet mode, while Redis does not answer for some limit, a line naming
/// the worst state and how many limits are in it: still 200 (a Redis outage is not this
/// server's failure: it goes on answering within the fleet's outage bounds, and a load
/// balancer should not take every server out at once), or 503 with `--redis-health-strict`.
/// With `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, 503 until a domain is configured.
async fn health(State(service): State<Arc<Service>>) -> Response {
    let report = service.engine.fleet_report().filter(|r| r.out() > 0);
    let healthy = service.healthy_given(report.as_ref());
    if healthy && report.is_none() {
        return "OK".into_response();
    }
    let (status, word) = if healthy {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
    };
    let mut body = word.to_owned();
    if service.awaiting_config() {
        body.push_str(" (no domain configured yet)");
    }
    if let Some(report) = report {
        body.push_str(&format!(
            " (redis {}: {} of {} limits not connected)",
            report.worst(),
            report.out(),
            report.limits()
        ));
    }
    body.push('\n');
    (status, body).into_response()
}

async fn metrics(State(service): State<Arc<Service>>) -> Response {
    let fleet = service.engine.fleet_report();
    let text = service.metrics.encode(service.engine.len(), fleet.as_ref());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn rlconfig(State(service): State<Arc<Service>>) -> String {
    service.engine.config().dump()
}
