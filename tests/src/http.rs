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
