//! A bare HTTP/1.1 client for the HTTP door's tests: one request written
//! as given (so a test can craft any head, or trickle a body), one answer
//! read by its Content-Length.

use std::io::{BufRead, BufReader, Read, Write};

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Write a request on `s` and read its answer (the body by its length).
pub fn exchange<S: Read + Write>(s: &mut S, head: &str, body: &[u8]) -> std::io::Result<Answer> {
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()?;
    read_answer(s)
}

pub fn read_answer<S: Read>(s: &mut S) -> std::io::Result<Answer> {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed before an answer",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').expect("a header line");
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

pub fn post_head(target: &str, extra_headers: &str, len: usize) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: spillway\r\nContent-Length: {len}\r\n{extra_headers}\r\n"
    )
}

/// POST `"{tag}:{n}"` records at `tier`, `size` to a body, lock-step on one
/// keep-alive connection to the HTTP door at `port`, until it fails (the
/// daemon died) or `limit` records were sent. A 200 acks the whole body;
/// anything else ends the run. `acked` is always a prefix of `sent`, as
/// [`crate::produce`]'s.
pub fn produce_http(
    port: u16,
    tag: &str,
    tier: crate::Tier,
    size: u64,
    limit: u64,
) -> crate::ProducerOutcome {
    let name = match tier {
        crate::Tier::Sync => "sync",
        crate::Tier::Batched => "batched",
        crate::Tier::Buffered => "buffered",
    };
    let mut out = crate::ProducerOutcome {
        tag: tag.to_string(),
        sent: 0,
        acked: 0,
        error: String::new(),
    };
    let mut conn = match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(c) => c,
        Err(e) => {
            out.error = format!("HTTP connect: {e}");
            return out;
        }
    };
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let head_of = |len| post_head(&format!("/v1/records?tier={name}"), "", len);
    out.error = loop {
        if out.sent >= limit {
            break String::new();
        }
        let body: String = (out.sent..out.sent + size)
            .map(|n| format!("{tag}:{n}\n"))
            .collect();
        out.sent += size;
        match exchange(&mut conn, &head_of(body.len()), body.as_bytes()) {
            Ok(a) if a.status == 200 => out.acked += size,
            Ok(a) => break format!("HTTP {}: {}", a.status, a.body.trim()),
            Err(e) => break e.to_string(),
        }
    };
    out
}
