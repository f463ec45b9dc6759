//! How a record's payload is shown: to people on one line (`ctl tap`,
//! `ctl sink tail`), and to scripts in JSON. Text stays text with its
//! control characters and `\` escaped, so a payload never breaks the
//! line it is on; bytes that are not UTF-8 are shown as base64, and say so.

use std::fmt::Write as _;

use base64::Engine as _;

/// `payload` appended to `out` for a person: escaped text, or
/// `[N bytes, not UTF-8] base64:...`.
pub fn push_text(out: &mut String, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(s) => {
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    c if c.is_control() => {
                        let _ = write!(out, "{}", c.escape_default());
                    }
                    c => out.push(c),
                }
            }
        }
        Err(_) => {
            let _ = write!(
                out,
                "[{} bytes, not UTF-8] base64:{}",
                payload.len(),
                base64::engine::general_purpose::STANDARD.encode(payload)
            );
        }
    }
}

/// `payload` set on the JSON object `v`: `"payload"` when it is UTF-8,
/// else `"payload_base64"`.
pub fn set_json(v: &mut serde_json::Value, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(s) => v["payload"] = s.into(),
        Err(_) => {
            v["payload_base64"] = base64::engine::general_purpose::STANDARD
                .encode(payload)
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_what_would_break_a_line_and_shows_bytes_as_base64() {
        let mut out = String::new();
        push_text(&mut out, b"a\nb\\c \"d\"");
        assert_eq!(out, "a\\nb\\\\c \"d\"");
        out.clear();
        push_text(&mut out, &[0xff, 0x00, 0x61]);
        assert_eq!(out, "[3 bytes, not UTF-8] base64:/wBh");
    }

    #[test]
    fn json_has_the_payload_as_text_or_base64() {
        let mut v = serde_json::json!({});
        set_json(&mut v, b"{\"k\":1}");
        assert_eq!(v["payload"], "{\"k\":1}");
        let mut v = serde_json::json!({});
        set_json(&mut v, &[0xff, 0x00, 0x61]);
        assert_eq!(v["payload_base64"], "/wBh");
        assert!(v.get("payload").is_none());
    }
}
