//! # spillway-ctl: the admin socket's line protocol
//!
//! The admin socket (`admin.socket_path`) takes one command line, e.g.
//! `stats` or `dead-letter requeue 0:17`, and answers with `ok` or
//! `error: <why>` on the first line, then the body, then closes. Both sides
//! live here so they cannot drift apart: the daemon frames its reply with
//! [`reply`], and [`call`] (used by `spillway ctl` and `spillway bench`)
//! sends a command and unframes the answer.
//!
//! This crate uses only the standard library, so the daemon built without
//! the bench still links nothing it does not need.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The first line of a successful reply.
const OK: &str = "ok";
/// What an error reply's first line starts with; the reason follows.
const ERROR_PREFIX: &str = "error: ";

/// The bytes the daemon writes for the outcome of one command.
pub fn reply(outcome: Result<String, String>) -> String {
    match outcome {
        Ok(body) => format!("{OK}\n{body}"),
        Err(why) => format!("{ERROR_PREFIX}{why}\n"),
    }
}

/// Send `command` to the admin socket at `socket` and return the reply's
/// body, or the daemon's reason (or why it could not be reached).
pub fn call(socket: &Path, command: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "connecting to the admin socket {}: {e} (is the daemon running?)",
            socket.display()
        )
    })?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    parse_reply(&answer)
}

/// The body of an `ok` reply, or the reason of an `error:` one.
fn parse_reply(answer: &str) -> Result<String, String> {
    match answer.split_once('\n') {
        Some((OK, body)) => Ok(body.to_string()),
        // Errors may span lines (a TOML error shows the offending line).
        _ => match answer.strip_prefix(ERROR_PREFIX) {
            Some(why) => Err(why.trim_end().to_string()),
            None => Err(format!("unexpected reply {answer:?}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_unframes_to_what_was_framed() {
        let body = "shard 0: Running\nshard 1: Running\n".to_string();
        assert_eq!(parse_reply(&reply(Ok(body.clone()))), Ok(body));
        assert_eq!(parse_reply(&reply(Ok(String::new()))), Ok(String::new()));
        let why = "sink.url: expected http:// or https://\n  at line 3".to_string();
        assert_eq!(parse_reply(&reply(Err(why.clone()))), Err(why));
    }

    #[test]
    fn an_answer_in_no_known_shape_is_an_error_that_quotes_it() {
        let err = parse_reply("HTTP/1.1 400 Bad Request\r\n").unwrap_err();
        assert!(err.contains("unexpected reply"), "{err}");
        assert!(err.contains("HTTP/1.1 400"), "{err}");
    }
}
