//! Sending one request and classifying what came back.
//!
//! | answer                             | verdict                         |
//! |------------------------------------|---------------------------------|
//! | 2xx                                | delivered                       |
//! | 408, 429, 5xx                      | transient (honours Retry-After) |
//! | network error, timeout             | transient                       |
//! | 1xx, 3xx (redirects not followed)  | transient, with the reason      |
//! | any other 4xx                      | permanent: records rejected     |
//! | 600..=999 (no such status in HTTP) | transient, with the reason      |
//!
//! Every reason names the status (or the network error) and the target
//! (`METHOD url`), so a dead letter or a log line says where it failed.

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::config::HttpSettings;

/// How much of an error response's body a reason quotes.
pub const REASON_BODY_BYTES_MAX: usize = 200;
/// How much of a 2xx body is read (and dropped) so the connection can be
/// reused; a larger body closes the connection instead.
const SUCCESS_BODY_BYTES_MAX: usize = 64 * 1024;

/// What one request achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseVerdict {
    /// 2xx: the receiver has the records.
    Delivered,
    /// Try again later, not before `after` if the receiver said so.
    Transient {
        after: Option<Duration>,
        reason: String,
    },
    /// The receiver refused these records for good.
    Permanent { reason: String },
}

impl ResponseVerdict {
    pub fn is_transient(&self) -> bool {
        matches!(self, ResponseVerdict::Transient { .. })
    }
}

/// Sends `request` and classifies the answer. Never panics on a bad peer.
pub(crate) async fn send(request: RequestBuilder, settings: &HttpSettings) -> ResponseVerdict {
    match request.send().await {
        Ok(response) => classify(response, settings).await,
        Err(error) => ResponseVerdict::Transient {
            after: None,
            reason: network_reason(&error, settings),
        },
    }
}

async fn classify(mut response: Response, settings: &HttpSettings) -> ResponseVerdict {
    let status = response.status();
    let now = SystemTime::now();
    let body = if status.is_success() {
        // Failing to read the rest of a 2xx body does not undo the 2xx.
        let _ = read_prefix(&mut response, SUCCESS_BODY_BYTES_MAX).await;
        Vec::new()
    } else if status.is_informational() || status.is_redirection() {
        Vec::new()
    } else {
        read_prefix(&mut response, REASON_BODY_BYTES_MAX).await
    };
    response_verdict(
        status,
        response.headers(),
        &body,
        now,
        &settings.target,
        settings.retry_after_max,
    )
}

/// The verdict on an answer from `target` (`METHOD url`): the table above,
/// from its status, its headers and the start of its body (at most
/// [`REASON_BODY_BYTES_MAX`] bytes of it are quoted), with `Retry-After`
/// read against `now` and capped at `retry_after_max`. Pure, so the fuzz
/// targets (`testing/fuzz-targets/`) can drive it with any answer a peer could send.
pub fn response_verdict(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    target: &str,
    retry_after_max: Duration,
) -> ResponseVerdict {
    if status.is_success() {
        return ResponseVerdict::Delivered;
    }
    let status_text = status_text(status);
    if status.is_informational() || status.is_redirection() {
        let detail = match headers.get(LOCATION).and_then(|v| v.to_str().ok()) {
            Some(location) => format!(
                "redirects are not followed; point sink.url at the final address (Location: {location})"
            ),
            None if status.is_redirection() => {
                "redirects are not followed; point sink.url at the final address".to_string()
            }
            None => "unexpected informational response".to_string(),
        };
        return ResponseVerdict::Transient {
            after: None,
            reason: format!("{status_text}: {detail} ({target})"),
        };
    }
    let after = retry_after(headers, now).map(|after| after.min(retry_after_max));
    let quoted = &body[..body.len().min(REASON_BODY_BYTES_MAX)];
    let unknown = if status.as_u16() >= 600 {
        " (not a status HTTP defines)"
    } else {
        ""
    };
    let reason = format!("{status_text}{unknown}: {} ({target})", quote_body(quoted));
    if is_transient_status(status) {
        ResponseVerdict::Transient { after, reason }
    } else {
        ResponseVerdict::Permanent { reason }
    }
}

/// 408 Request Timeout, 429 Too Many Requests and every 5xx are worth
/// retrying; every other 4xx will fail the same way again. A status past
/// 599 has no meaning in HTTP: a broken receiver or something in between
/// answered, which says nothing against the records, so it is retried too
/// (dead-lettering a batch for it would hand the operator records that
/// were never refused).
pub(crate) fn is_transient_status(status: StatusCode) -> bool {
    !status.is_client_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// `"HTTP 400 Bad Request"`.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(text) => format!("HTTP {} {text}", status.as_u16()),
        None => format!("HTTP {}", status.as_u16()),
    }
}

/// `Retry-After` as delay-seconds or an HTTP-date; `None` if absent or
/// unreadable. A date in the past means "now".
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(text).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Up to `limit` bytes of the body; stops early on any error.
async fn read_prefix(response: &mut Response, limit: usize) -> Vec<u8> {
    let mut prefix = Vec::new();
    while prefix.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(limit - prefix.len());
                prefix.extend_from_slice(&chunk[..take]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    prefix
}

/// The body as one line of text fit for a log or a dead-letter reason.
fn quote_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match line.trim() {
        "" => "(empty body)".to_string(),
        trimmed => trimmed.to_string(),
    }
}

/// What went wrong before a status arrived, with the cause chain.
fn network_reason(error: &reqwest::Error, settings: &HttpSettings) -> String {
    let target = &settings.target;
    if error.is_timeout() {
        return format!(
            "no response within sink.timeout_ms = {} ({target})",
            settings.timeout.as_millis()
        );
    }
    let what = if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    // reqwest's own message repeats the full URL (query included): leave it
    // out and show the causes.
    let mut chain = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    if chain.is_empty() {
        chain.push(error.to_string());
    }
    format!("{what}: {} ({target})", chain.join(": "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn status_classes() {
        for code in [408, 429, 500, 502, 503, 504, 599, 600, 799, 999] {
            assert!(
                is_transient_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 409, 410, 413, 422, 499] {
            assert!(
                !is_transient_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
        assert_eq!(status_text(StatusCode::BAD_REQUEST), "HTTP 400 Bad Request");
        assert_eq!(status_text(StatusCode::from_u16(499).unwrap()), "HTTP 499");
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_static(v));
            retry_after(&h, now)
        };
        assert_eq!(with("2"), Some(Duration::from_secs(2)));
        assert_eq!(with(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(
            with("Sun, 06 Nov 1994 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(with("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(with("-1"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn body_quotes_are_one_line() {
        assert_eq!(quote_body(b"bad\r\nthing\t"), "bad  thing");
        assert_eq!(quote_body(b""), "(empty body)");
        assert_eq!(quote_body(b"\xffx"), "\u{fffd}x");
    }
}
