//! The HTTP sink's reading of an answer (status, headers, body) into a
//! verdict: whatever a receiver sends, the verdict follows the table of
//! `sinks/src/http/service.rs`, a `Retry-After` never holds delivery past
//! the drain's longest backoff, and the reason is one bounded line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use http::{HeaderMap, StatusCode};
use spillway_sinks::http::{response_verdict, ResponseVerdict, REASON_BODY_BYTES_MAX};

/// How the reasons name the target (as `HttpSettings::target` would).
const TARGET: &str = "POST http://127.0.0.1:9/ingest";

/// Input: a status (2 bytes LE, folded into 100..=999), the longest
/// `Retry-After` honoured (1 byte, in seconds), the clock (4 bytes LE,
/// seconds since the epoch), a header count (1 byte, at most 8), then per
/// header a name selector (1 byte: Retry-After, Location, Content-Type or
/// a made-up name) and a value (1 byte length, then the bytes); the rest
/// is the body.
///
/// Checks the verdict against the table (2xx delivered; 1xx and 3xx
/// transient with no wait; 408, 429, 5xx and 600..=999 transient; any
/// other 4xx permanent); a wait only on a transient verdict with a readable
/// `Retry-After`, never past the cap, exactly `min(n s, cap)` for
/// delay-seconds `n`; a reason that names the status and the target, has
/// no line break, and quotes at most its share of the body.
pub fn http_response(data: &[u8]) {
    let mut input = Input(data);
    let code = 100 + input.u16() % 900;
    let status = StatusCode::from_u16(code).expect("100..=999 is a status");
    let cap = Duration::from_secs(input.u8() as u64);
    let now = UNIX_EPOCH + Duration::from_secs(input.u32() as u64);
    let mut headers = HeaderMap::new();
    for _ in 0..input.u8() % 9 {
        let name = match input.u8() % 4 {
            0 | 1 => RETRY_AFTER,
            2 => LOCATION,
            _ => CONTENT_TYPE,
        };
        let len = input.u8() as usize;
        let value = input.take(len);
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    headers.append(
        HeaderName::from_static("x-fuzz"),
        HeaderValue::from_static("1"),
    );
    let body = input.0;

    let verdict = response_verdict(status, &headers, body, now, TARGET, cap);
    let again = response_verdict(status, &headers, body, now, TARGET, cap);
    assert_eq!(verdict, again, "the same answer judged twice differently");
    let transient_status = code == 408 || code == 429 || code >= 500;
    match &verdict {
        ResponseVerdict::Delivered => assert!(status.is_success(), "{code} delivered"),
        ResponseVerdict::Transient { after, reason } => {
            assert!(
                status.is_informational() || status.is_redirection() || transient_status,
                "{code} is transient"
            );
            check_reason(code, reason, body, &headers);
            if status.is_informational() || status.is_redirection() {
                assert_eq!(*after, None, "{code} waits");
            }
            check_wait(*after, &headers, now, cap, transient_status);
        }
        ResponseVerdict::Permanent { reason } => {
            // The table's "any other 4xx".
            assert!(
                (400..500).contains(&code) && !transient_status,
                "{code} is permanent"
            );
            check_reason(code, reason, body, &headers);
        }
    }
}

/// The wait a transient verdict carries, against the first `Retry-After`.
fn check_wait(
    after: Option<Duration>,
    headers: &HeaderMap,
    now: SystemTime,
    cap: Duration,
    transient_status: bool,
) {
    let Some(after) = after else { return };
    assert!(after <= cap, "waits {after:?}, past the cap {cap:?}");
    let value = headers
        .get(RETRY_AFTER)
        .expect("a wait needs a Retry-After")
        .to_str()
        .expect("a wait needs a readable Retry-After")
        .trim();
    assert!(transient_status);
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(seconds) = value.parse::<u64>() {
            assert_eq!(after, Duration::from_secs(seconds).min(cap), "{value:?}");
        }
    } else if let Ok(when) = httpdate::parse_http_date(value) {
        let expected = when.duration_since(now).unwrap_or(Duration::ZERO).min(cap);
        assert_eq!(after, expected, "{value:?}");
    }
}

/// A reason names the status and the target, is one line, and is bounded.
fn check_reason(code: u16, reason: &str, body: &[u8], headers: &HeaderMap) {
    assert!(reason.starts_with(&format!("HTTP {code}")), "{reason:?}");
    assert!(reason.ends_with(&format!("({TARGET})")), "{reason:?}");
    assert!(
        !reason.contains(['\n', '\r']),
        "a reason with a line break: {reason:?}"
    );
    // Status text, the longest fixed wording, the target; each quoted body
    // byte may become U+FFFD (3 bytes); a Location header is quoted whole.
    let location = headers.get(LOCATION).map_or(0, |v| v.len());
    let bound = 200 + TARGET.len() + 3 * REASON_BODY_BYTES_MAX.min(body.len()) + location;
    assert!(
        reason.len() <= bound,
        "a reason of {} bytes (bound {bound})",
        reason.len()
    );
}

/// The input read front to back; past its end every field reads as zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let head = self.take(N);
        out[..head.len()].copy_from_slice(head);
        out
    }

    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
}
