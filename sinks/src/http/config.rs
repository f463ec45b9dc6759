//! The HTTP sink's settings, resolved once from the user's [`SinkConfig`]
//! when the sink is built: defaults filled in, the URL parsed, the bearer
//! token read from the environment, the static headers assembled. Every
//! instance (one per shard) shares the same immutable [`HttpSettings`].

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::{Method, Url};
use sink_sdk::Limits;

use crate::config::{
    check_http_url, Delivery, HttpEncoding, SinkConfig, SinkKind, DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_MS,
};

/// Everything an HTTP sink instance needs to build and send requests.
#[derive(Debug)]
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
    /// The user's headers and `Authorization`, sent with every request.
    pub headers: HeaderMap,
    /// Longest `Retry-After` honoured: the drain's own longest backoff.
    pub retry_after_max: Duration,
    pub limits: Limits,
}

impl HttpSettings {
    /// Validates and resolves a config of `type = "http"`. Fails if the bearer
    /// token variable is unset or its value cannot be a header.
    pub fn from_config(cfg: &SinkConfig) -> Result<HttpSettings, String> {
        if cfg.kind != SinkKind::Http {
            return Err(format!(
                "an http sink cannot be built from type = \"{}\"",
                cfg.kind
            ));
        }
        cfg.validate().map_err(|e| e.to_string())?;
        let url_text = cfg
            .url
            .as_deref()
            .ok_or("sink.url is required for type = \"http\"")?;
        let url = check_http_url(url_text).map_err(|e| e.to_string())?;
        let method = match cfg.method.unwrap_or_default() {
            crate::config::HttpMethod::Post => Method::POST,
            crate::config::HttpMethod::Put => Method::PUT,
            crate::config::HttpMethod::Patch => Method::PATCH,
        };
        let delivery = cfg.delivery.unwrap_or_default();
        let concurrency = match delivery {
            Delivery::Batched => 1,
            Delivery::PerRecord => cfg.concurrency.unwrap_or(DEFAULT_CONCURRENCY) as usize,
        };
        Ok(HttpSettings {
            target: format!("{method} {}", shown_url(&url)),
            url,
            method,
            delivery,
            encoding: cfg.encoding.unwrap_or_default(),
            gzip: cfg.gzip.unwrap_or(false),
            timeout: Duration::from_millis(cfg.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            concurrency,
            headers: static_headers(cfg)?,
            retry_after_max: cfg.retry_max(),
            limits: crate::limits(cfg),
        })
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

fn static_headers(cfg: &SinkConfig) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in cfg.headers.iter().flatten() {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("sink.headers.{name:?} is not a valid HTTP header name"))?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            format!("sink.headers.{name:?}: the value is not a valid HTTP header value")
        })?;
        headers.insert(name, value);
    }
    if let Some(var) = &cfg.bearer_token_env {
        let token = std::env::var(var).map_err(|e| {
            format!("sink.bearer_token_env: environment variable {var} cannot be used: {e}")
        })?;
        if token.is_empty() {
            return Err(format!(
                "sink.bearer_token_env: environment variable {var} is empty"
            ));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            format!("sink.bearer_token_env: the token in {var} is not a valid HTTP header value")
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_hides_credentials_and_query() {
        let cfg = SinkConfig {
            url: Some("https://user:pw@example.test:8443/in?api_key=secret#x".into()),
            ..SinkConfig::empty(SinkKind::Http)
        };
        let s = HttpSettings::from_config(&cfg).unwrap();
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
        let cfg = SinkConfig {
            url: Some("http://127.0.0.1:9/".into()),
            bearer_token_env: Some("SPILLWAY_TEST_TOKEN_THAT_IS_NEVER_SET".into()),
            ..SinkConfig::empty(SinkKind::Http)
        };
        let e = HttpSettings::from_config(&cfg).unwrap_err();
        assert!(
            e.starts_with(
                "sink.bearer_token_env: environment variable SPILLWAY_TEST_TOKEN_THAT_IS_NEVER_SET"
            ),
            "{e}"
        );
    }
}
