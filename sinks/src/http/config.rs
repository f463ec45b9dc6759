//! The HTTP sink's keys ([`HttpConfig`]: what the user writes, with its
//! defaults, ranges and checks) and the [`HttpSettings`] they resolve to.
//!
//! [`HttpConfig::check`] runs once per table (see `crate::config`): it
//! checks every key, parses the URL and the headers, and fills in the
//! defaults. The bearer token is read from the environment only when the
//! sink is built ([`HttpSettings::with_bearer_token`]), at start and at
//! every reload. Every instance (one per shard) shares the same immutable
//! [`HttpSettings`].

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::{Method, Url};
use serde::Deserialize;
use sink_sdk::keys::{Allowed, DefaultValue, Unit};
use sink_sdk::Limits;

use crate::keys::{check_env_var_name, DeliveryConfig};
use crate::sink_keys;
use crate::{KeyProblem, SinkError};

pub(crate) const DEFAULT_TIMEOUT_MS: u64 = 10_000;
pub(crate) const TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
pub(crate) const DEFAULT_CONCURRENCY: u32 = 8;
pub(crate) const CONCURRENCY_RANGE: RangeInclusive<u32> = 1..=256;

/// How the HTTP sink maps records to requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// One request per batch, the body framed by `encoding`.
    #[default]
    Batched,
    /// One request per record, the raw payload as the body.
    PerRecord,
}

/// HTTP method of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum HttpMethod {
    #[default]
    #[serde(rename = "POST")]
    Post,
    #[serde(rename = "PUT")]
    Put,
    #[serde(rename = "PATCH")]
    Patch,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
        }
    }
}

/// Body framing of a batched HTTP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpEncoding {
    /// Each payload followed by `\n` (`application/x-ndjson`).
    #[default]
    Ndjson,
    /// `[p1,p2,...]`; every payload must be a JSON value (`application/json`).
    JsonArray,
    /// Each payload as u32 little-endian length + bytes
    /// (`application/octet-stream`).
    LengthPrefixed,
}

impl HttpEncoding {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpEncoding::Ndjson => "ndjson",
            HttpEncoding::JsonArray => "json_array",
            HttpEncoding::LengthPrefixed => "length_prefixed",
        }
    }
}

sink_keys! {
    /// The keys of `type = "http"` (rendered into docs/sinks.md). Unset
    /// keys take the defaults declared here; header values are redacted in
    /// `Debug` (they often hold API keys).
    pub struct HttpConfig in "sink.http" {
        url: String = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"an `http://` or `https://` URL with a host"#),
            also: "",
            meaning: r#"The endpoint."#,
        },
        delivery: Delivery = Key {
            default: DefaultValue::Str("batched"),
            allowed: Allowed::OneOf(&["batched", "per_record"]),
            also: "",
            meaning: r#"One request per batch, or one per record."#,
        },
        method: HttpMethod = Key {
            default: DefaultValue::Str("POST"),
            allowed: Allowed::OneOf(&["POST", "PUT", "PATCH"]),
            also: "",
            meaning: r#"HTTP method of every request."#,
        },
        headers: BTreeMap<String, String> = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Shaped {
                text: r#"a table of string = string; valid header names and values"#,
                schema: r#"{"type": "object", "additionalProperties": {"type": "string"}}"#,
            },
            also: "",
            meaning: r#"Extra headers on every request (see below)."#,
            secret: true,
        },
        token_env: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"an environment variable name"#),
            also: "",
            meaning: r#"The variable holding a token, sent as `Authorization: Bearer <token>`; it must be set (and non-empty) when the sink is built, at start and at every reload; `spillway check` checks it too."#,
        },
        gzip: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Gzip every request body and send `Content-Encoding: gzip`."#,
        },
        timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *TIMEOUT_MS_RANGE.start(),
                max: *TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Limit of one request, from connect to the last response byte."#,
        },
        concurrency: u32 = Key {
            default: DefaultValue::Int(DEFAULT_CONCURRENCY as u64),
            allowed: Allowed::Range {
                min: *CONCURRENCY_RANGE.start() as u64,
                max: *CONCURRENCY_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"`per_record` only: requests in flight at once."#,
        },
        encoding: HttpEncoding = Key {
            default: DefaultValue::Str("ndjson"),
            allowed: Allowed::OneOf(&["ndjson", "json_array", "length_prefixed"]),
            also: "",
            meaning: r#"`batched` only: how records are framed in the body."#,
        },
    }
}

impl HttpConfig {
    /// Checks every key and resolves them, with the delivery keys, into the
    /// settings instances use. Reports the first problem found. Reads
    /// neither the environment nor the network.
    pub(crate) fn check(&self, delivery_keys: &DeliveryConfig) -> Result<HttpSettings, KeyProblem> {
        let Some(url) = &self.url else {
            return Err(KeyProblem::Missing {
                key: "url",
                kind: super::TYPE.name,
            });
        };
        let url = check_http_url(url)?;
        let delivery = self.delivery.unwrap_or_default();
        if delivery == Delivery::PerRecord && self.encoding.is_some() {
            return Err(KeyProblem::NotApplicable {
                key: "encoding",
                kind: super::TYPE.name,
                hint: " with delivery = \"per_record\" (each body is the raw payload)".into(),
            });
        }
        if delivery == Delivery::Batched && self.concurrency.is_some() {
            return Err(KeyProblem::NotApplicable {
                key: "concurrency",
                kind: super::TYPE.name,
                hint: " with delivery = \"batched\" (one request per batch at a time)".into(),
            });
        }
        self.check_ranges()?;
        if let Some(name) = &self.token_env {
            check_env_var_name("token_env", name)?;
        }
        let mut headers = HeaderMap::new();
        for (name, value) in self.headers.iter().flatten() {
            let (name, value) = check_header(name, value, self.token_env.is_some())?;
            headers.insert(name, value);
        }
        let method = match self.method.unwrap_or_default() {
            HttpMethod::Post => Method::POST,
            HttpMethod::Put => Method::PUT,
            HttpMethod::Patch => Method::PATCH,
        };
        let concurrency = match delivery {
            Delivery::Batched => 1,
            Delivery::PerRecord => self.concurrency.unwrap_or(DEFAULT_CONCURRENCY) as usize,
        };
        Ok(HttpSettings {
            target: format!("{method} {}", shown_url(&url)),
            url,
            method,
            delivery,
            encoding: self.encoding.unwrap_or_default(),
            gzip: self.gzip.unwrap_or(false),
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            concurrency,
            headers,
            token_env: self.token_env.clone(),
            retry_after_max: delivery_keys.retry_max(),
            limits: delivery_keys.limits(),
        })
    }
}

/// Everything an HTTP sink instance needs to build and send requests.
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    pub url: Url,
    /// `"POST http://host:port/path"`: how reasons and logs name the target.
    /// Without user info and query string, which may hold credentials.
    pub target: String,
    pub method: Method,
    pub delivery: Delivery,
    /// Body framing for `delivery = "batched"`.
    pub encoding: HttpEncoding,
    pub gzip: bool,
    /// Limit of one request, connect to last response byte.
    pub timeout: Duration,
    /// Requests in flight at once with `delivery = "per_record"`; 1 when
    /// batched (the drain offers one batch at a time).
    pub concurrency: usize,
    /// Sent with every request: the user's headers, and `Authorization`
    /// once [`HttpSettings::with_bearer_token`] has read the token.
    pub headers: HeaderMap,
    /// The variable holding the bearer token, if any.
    pub token_env: Option<String>,
    /// Longest `Retry-After` honoured: the drain's own longest backoff.
    pub retry_after_max: Duration,
    pub limits: Limits,
}

impl HttpSettings {
    /// These settings with the `Authorization` header from
    /// `token_env`, read now (the sink is being built). Fails if the
    /// variable is unset or empty, or its value cannot be a header; the
    /// error names `<table>.token_env`.
    pub fn with_bearer_token(&self, table: &str) -> Result<HttpSettings, SinkError> {
        let mut settings = self.clone();
        if let Some(var) = &self.token_env {
            let header = bearer_header(var).map_err(|e| SinkError::key(table, "token_env", e))?;
            settings.headers.insert(AUTHORIZATION, header);
        }
        Ok(settings)
    }

    /// One line for logs: what this sink sends where.
    pub fn describe(&self) -> String {
        let shape = match self.delivery {
            Delivery::Batched => format!("batched, {}", self.encoding.as_str()),
            Delivery::PerRecord => format!("per_record, concurrency {}", self.concurrency),
        };
        let gzip = if self.gzip { ", gzip" } else { "" };
        let auth = if self.headers.contains_key(AUTHORIZATION) {
            ", authorization"
        } else {
            ""
        };
        format!(
            "http {} ({shape}{gzip}{auth}, timeout {} ms)",
            self.target,
            self.timeout.as_millis()
        )
    }
}

/// The URL without user info, query or fragment.
fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    // Both fail only for URLs that cannot have user info; ours can.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// `Bearer <token>` from the environment variable `var`, marked sensitive;
/// else why not (the caller names the key).
fn bearer_header(var: &str) -> Result<HeaderValue, String> {
    let token = std::env::var(var)
        .map_err(|e| format!("environment variable {var} cannot be used: {e}"))?;
    if token.is_empty() {
        return Err(format!("environment variable {var} is empty"));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| format!("the token in {var} is not a valid HTTP header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The URL must parse and be http(s) with a host.
fn check_http_url(url: &str) -> Result<Url, KeyProblem> {
    let invalid = |reason: String| KeyProblem::Invalid {
        key: "url".into(),
        reason,
    };
    let parsed = Url::parse(url).map_err(|e| invalid(format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "{url:?} has scheme \"{}\"; allowed: http:// or https://",
            parsed.scheme()
        )));
    }
    if !matches!(parsed.host_str(), Some(host) if !host.is_empty()) {
        return Err(invalid(format!("{url:?} has no host")));
    }
    Ok(parsed)
}

/// Header names spillway sets itself (lower case). `authorization` is
/// reserved only when `token_env` is set.
const RESERVED_HEADERS: &[&str] = &[
    "idempotency-key",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "host",
];

/// One of the user's headers, parsed.
fn check_header(
    name: &str,
    value: &str,
    has_bearer: bool,
) -> Result<(HeaderName, HeaderValue), KeyProblem> {
    let invalid = |reason: String| KeyProblem::Invalid {
        key: format!("headers.{name:?}"),
        reason,
    };
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| invalid(format!("{name:?} is not a valid HTTP header name")))?;
    let lower = parsed.as_str();
    if RESERVED_HEADERS.contains(&lower) || lower.starts_with("spillway-") {
        return Err(invalid(format!(
            "{name} is set by spillway and cannot be overridden"
        )));
    }
    if has_bearer && lower == "authorization" {
        return Err(KeyProblem::AgainstKey {
            key: format!("headers.{name:?}"),
            head: ": Authorization is set from ".into(),
            other: "token_env",
            tail: "; set one or the other".into(),
        });
    }
    let value = HeaderValue::from_str(value).map_err(|_| {
        invalid(
            "the value is not a valid HTTP header value (control characters or non-ASCII)".into(),
        )
    })?;
    Ok((parsed, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{err, parse};
    use crate::config::TypeConfig;
    use crate::SinkConfig;

    fn http() -> HttpConfig {
        HttpConfig {
            url: Some("http://127.0.0.1:9/ingest".into()),
            ..HttpConfig::default()
        }
    }

    /// A `[sink]` table of `type = "http"` with these keys.
    fn table(http: HttpConfig) -> SinkConfig {
        SinkConfig::new(TypeConfig::new(http), DeliveryConfig::default())
    }

    /// The HTTP keys of a table of `type = "http"`.
    fn keys(cfg: &SinkConfig) -> &HttpConfig {
        cfg.type_config()
            .keys()
            .unwrap_or_else(|| panic!("not an http table: {cfg:?}"))
    }

    fn settings(http: HttpConfig) -> HttpSettings {
        http.check(&DeliveryConfig::default()).expect("valid")
    }

    #[test]
    fn parse_minimal_http_gets_defaults() {
        let cfg = parse("[sink]\ntype = \"http\"\nurl = \"https://example.test/in\"\n").unwrap();
        assert_eq!(cfg.sink_type().name, "http");
        assert_eq!(keys(&cfg).delivery, None);
        assert_eq!(cfg.delivery().batch_records_max, 1000);
        assert_eq!(cfg.delivery().batch_bytes_max, 4 * 1024 * 1024);
        assert_eq!(cfg.delivery().linger_ms, 5);
        assert_eq!(cfg.delivery().retry_initial_ms, 100);
        assert_eq!(cfg.delivery().retry_max_ms, 30_000);
        assert_eq!(cfg.delivery().retry_duration_max_ms, 0);
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(
            cfg,
            table(HttpConfig {
                url: Some("https://example.test/in".into()),
                ..HttpConfig::default()
            })
        );
    }

    #[test]
    fn parse_full_http() {
        let cfg = parse(
            r#"
[sink]
type = "http"
url = "http://127.0.0.1:8080/x"
delivery = "per_record"
method = "PUT"
headers = { "X-Tenant" = "a1" }
gzip = true
timeout_ms = 2500
concurrency = 16
retry_duration_max_ms = 60000
"#,
        )
        .unwrap();
        let http = keys(&cfg);
        assert_eq!(http.delivery, Some(Delivery::PerRecord));
        assert_eq!(http.method, Some(HttpMethod::Put));
        assert_eq!(http.headers.as_ref().unwrap()["X-Tenant"], "a1");
        assert_eq!(http.concurrency, Some(16));
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(
            cfg.delivery().retry_duration_max(),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn every_key_is_read() {
        let cfg = parse(
            r#"
[sink]
type = "http"
url = "http://a/"
delivery = "per_record"
method = "PATCH"
headers = {}
token_env = "T"
gzip = false
timeout_ms = 1000
concurrency = 1
encoding = "ndjson"
"#,
        )
        .unwrap();
        // Naming every field: a new key must be added here, and so to REFERENCE.
        let HttpConfig {
            url,
            delivery,
            method,
            headers,
            token_env,
            gzip,
            timeout_ms,
            concurrency,
            encoding,
        } = keys(&cfg);
        let set = [
            url.is_some(),
            delivery.is_some(),
            method.is_some(),
            headers.is_some(),
            token_env.is_some(),
            gzip.is_some(),
            timeout_ms.is_some(),
            concurrency.is_some(),
            encoding.is_some(),
        ];
        assert!(set.iter().all(|s| *s), "a key is missing from REFERENCE");
        assert_eq!(set.len(), HttpConfig::REFERENCE.len());
    }

    #[test]
    fn bad_enum_value_lists_the_allowed_ones() {
        let e =
            parse("[sink]\ntype = \"http\"\nurl = \"http://a\"\nmethod = \"GET\"\n").unwrap_err();
        assert!(e.contains("`POST`, `PUT`, `PATCH`"), "{e}");
        let e =
            parse("[sink]\ntype = \"http\"\nurl = \"http://a\"\nencoding = \"csv\"\n").unwrap_err();
        assert!(
            e.contains("`ndjson`, `json_array`, `length_prefixed`"),
            "{e}"
        );
    }

    #[test]
    fn keys_of_the_other_delivery_are_errors() {
        let cfg = table(HttpConfig {
            delivery: Some(Delivery::PerRecord),
            encoding: Some(HttpEncoding::Ndjson),
            ..http()
        });
        assert!(err(&cfg).starts_with(
            "sink.encoding is not used by type = \"http\" with delivery = \"per_record\""
        ));
        let cfg = table(HttpConfig {
            concurrency: Some(4),
            ..http()
        });
        assert!(err(&cfg).starts_with(
            "sink.concurrency is not used by type = \"http\" with delivery = \"batched\""
        ));
    }

    #[test]
    fn url_is_required() {
        assert_eq!(
            err(&table(HttpConfig::default())),
            "sink.url is required for type = \"http\""
        );
    }

    #[test]
    fn url_must_be_http_or_https() {
        for bad in [
            "ftp://a/b",
            "not a url",
            "unix:/tmp/sock",
            "file:///etc/passwd",
        ] {
            let cfg = table(HttpConfig {
                url: Some(bad.into()),
                ..http()
            });
            assert!(err(&cfg).starts_with("sink.url: "), "{bad}: {}", err(&cfg));
        }
        let cfg = table(HttpConfig {
            url: Some("ftp://a/b".into()),
            ..http()
        });
        assert!(err(&cfg).contains("allowed: http:// or https://"));
        for good in [
            "http://localhost:8080/x",
            "https://example.test",
            "http://[::1]:9/a?b=c",
        ] {
            let cfg = table(HttpConfig {
                url: Some(good.into()),
                ..http()
            });
            assert_eq!(cfg.validate(), Ok(()), "{good}");
        }
    }

    #[test]
    fn range_errors_name_the_key_and_the_range() {
        let cases: Vec<(HttpConfig, &str)> = vec![
            (
                HttpConfig {
                    timeout_ms: Some(99),
                    ..http()
                },
                "sink.timeout_ms = 99 is out of range: allowed 100..=600000",
            ),
            (
                HttpConfig {
                    timeout_ms: Some(600_001),
                    ..http()
                },
                "sink.timeout_ms = 600001",
            ),
            (
                HttpConfig {
                    delivery: Some(Delivery::PerRecord),
                    concurrency: Some(0),
                    ..http()
                },
                "sink.concurrency = 0 is out of range: allowed 1..=256",
            ),
            (
                HttpConfig {
                    delivery: Some(Delivery::PerRecord),
                    concurrency: Some(257),
                    ..http()
                },
                "sink.concurrency = 257",
            ),
        ];
        for (http, want) in cases {
            let got = err(&table(http));
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn range_bounds_are_inclusive() {
        let ok = [
            HttpConfig {
                timeout_ms: Some(100),
                ..http()
            },
            HttpConfig {
                timeout_ms: Some(600_000),
                ..http()
            },
            HttpConfig {
                delivery: Some(Delivery::PerRecord),
                concurrency: Some(256),
                ..http()
            },
        ];
        for http in ok {
            let cfg = table(http);
            assert_eq!(cfg.validate(), Ok(()), "{cfg:?}");
        }
    }

    #[test]
    fn header_names_and_values_are_checked() {
        let with = |name: &str, value: &str| {
            table(HttpConfig {
                headers: Some(BTreeMap::from([(name.to_string(), value.to_string())])),
                ..http()
            })
        };
        assert_eq!(with("X-Tenant", "blue").validate(), Ok(()));
        assert_eq!(with("Content-Type", "application/json").validate(), Ok(()));
        assert_eq!(with("Authorization", "Basic abc").validate(), Ok(()));
        assert!(
            err(&with("Bad Name", "x")).starts_with("sink.headers.\"Bad Name\": "),
            "{}",
            err(&with("Bad Name", "x"))
        );
        assert!(err(&with("X-Ok", "line\nbreak")).contains("not a valid HTTP header value"));
        assert!(err(&with("Idempotency-Key", "k")).contains("set by spillway"));
        assert!(err(&with("spillway-shard", "1")).contains("set by spillway"));
        assert!(err(&with("Content-Encoding", "br")).contains("set by spillway"));
        let both = table(HttpConfig {
            token_env: Some("TOKEN".into()),
            headers: Some(BTreeMap::from([("authorization".into(), "x".into())])),
            ..http()
        });
        assert!(err(&both).contains("sink.token_env"));
    }

    #[test]
    fn bearer_env_name_is_checked() {
        let cfg = table(HttpConfig {
            token_env: Some("A=B".into()),
            ..http()
        });
        assert!(err(&cfg).starts_with("sink.token_env: "));
    }

    #[test]
    fn debug_redacts_header_values() {
        let cfg = table(HttpConfig {
            headers: Some(BTreeMap::from([(
                "X-Api-Key".to_string(),
                "s3cret".to_string(),
            )])),
            ..http()
        });
        let shown = format!("{cfg:?}");
        assert!(
            shown.contains("X-Api-Key") && !shown.contains("s3cret"),
            "{shown}"
        );
    }

    #[test]
    fn target_hides_credentials_and_query() {
        let s = settings(HttpConfig {
            url: Some("https://user:pw@example.test:8443/in?api_key=secret#x".into()),
            ..HttpConfig::default()
        });
        assert_eq!(s.target, "POST https://example.test:8443/in");
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.concurrency, 1);
        assert_eq!(
            s.limits,
            Limits {
                max_records: 1000,
                max_bytes: 4 << 20
            }
        );
    }

    #[test]
    fn unset_token_variable_fails_the_build() {
        let s = settings(HttpConfig {
            url: Some("http://127.0.0.1:9/".into()),
            token_env: Some("SPILLWAY_TEST_TOKEN_THAT_IS_NEVER_SET".into()),
            ..HttpConfig::default()
        });
        let e = s.with_bearer_token("sink").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "sink.token_env: environment variable SPILLWAY_TEST_TOKEN_THAT_IS_NEVER_SET"
            ),
            "{e}"
        );
    }
}
