//! Record framings shared by the HTTP and file sinks: how payloads are laid
//! one after another in a body or a file, and which payloads a framing
//! cannot carry.
//!
//! A payload a framing cannot carry (a newline inside an NDJSON line,
//! invalid JSON inside a JSON array, more than 4 GiB behind a u32 length)
//! is rejected on its own, with a reason that says how to fix the config;
//! the other records of the batch are still delivered.
//!
//! [`BodyFraming`] is the layout of a built-in sink's body. Its NDJSON and
//! length-prefixed forms are sink-sdk's stream framing
//! (`sink_sdk::output::Framing`, imported here as `StreamFraming`, which
//! plugins use too); this adds the JSON array and the advice that names the
//! sink's own config keys.

use sink_sdk::output::Framing as StreamFraming;

/// A way to lay records out in one byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// Each payload followed by `\n`.
    Ndjson,
    /// `[p1,p2,...]`: each payload a JSON value.
    JsonArray,
    /// Each payload as its u32 little-endian length, then its bytes.
    LengthPrefixed,
}

impl BodyFraming {
    /// The sink-sdk framing that lays out this one, if any: NDJSON and
    /// length-prefixed frames are shared with plugins; a JSON array needs
    /// a JSON parser, which sink-sdk does without.
    fn stream(self) -> Option<StreamFraming> {
        match self {
            BodyFraming::Ndjson => Some(StreamFraming::Ndjson),
            BodyFraming::JsonArray => None,
            BodyFraming::LengthPrefixed => Some(StreamFraming::LengthPrefixed),
        }
    }

    /// Whether `payload` can be framed; `Err` holds the rejection reason.
    /// `alternatives` completes the newline message's advice, e.g.
    /// `encoding = "length_prefixed" or "json_array"`.
    pub(crate) fn check(self, payload: &[u8], alternatives: &str) -> Result<(), String> {
        match self.stream() {
            Some(stream) => stream
                .check(payload)
                .map_err(|e| e.reason(&format!("use {alternatives}"))),
            None => check_json_value(payload),
        }
    }

    /// Bytes the framing adds around `count` records of `payload_bytes`.
    pub(crate) fn framed_len(self, count: usize, payload_bytes: usize) -> usize {
        match self.stream() {
            Some(stream) => stream.framed_len(count, payload_bytes),
            None => payload_bytes + count.max(1) + 1,
        }
    }

    /// Starts a body: call once before the first [`BodyFraming::push`].
    pub(crate) fn open(self, out: &mut Vec<u8>) {
        if self == BodyFraming::JsonArray {
            out.push(b'[');
        }
    }

    /// Appends one payload that passed [`BodyFraming::check`]. `first` is true
    /// for the first payload of the body.
    pub(crate) fn push(self, out: &mut Vec<u8>, payload: &[u8], first: bool) {
        match self.stream() {
            Some(stream) => stream.push(out, payload),
            None => {
                if !first {
                    out.push(b',');
                }
                out.extend_from_slice(payload);
            }
        }
    }

    /// Ends a body: call once after the last [`BodyFraming::push`].
    pub(crate) fn close(self, out: &mut Vec<u8>) {
        if self == BodyFraming::JsonArray {
            out.push(b']');
        }
    }
}

/// A JSON array element must be one complete JSON value in UTF-8.
fn check_json_value(payload: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(payload).map_err(|e| {
        format!(
            "record is not valid UTF-8 at byte {}, so not a JSON value",
            e.valid_up_to()
        )
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| format!("record is not a JSON value: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(framing: BodyFraming, payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        framing.open(&mut out);
        for (i, p) in payloads.iter().enumerate() {
            framing.check(p, "x").unwrap();
            framing.push(&mut out, p, i == 0);
        }
        framing.close(&mut out);
        let bytes: usize = payloads.iter().map(|p| p.len()).sum();
        assert_eq!(out.len(), framing.framed_len(payloads.len(), bytes));
        out
    }

    #[test]
    fn ndjson_lines() {
        assert_eq!(
            frame(BodyFraming::Ndjson, &[b"{\"a\":1}", b"", b"x"]),
            b"{\"a\":1}\n\nx\n"
        );
        assert_eq!(
            BodyFraming::Ndjson.check(b"ab\ncd", "format = \"length_prefixed\""),
            Err(
                "record contains a newline byte at offset 2; use format = \"length_prefixed\""
                    .into()
            )
        );
        assert_eq!(BodyFraming::Ndjson.check(b"a\rb", "x"), Ok(()));
    }

    #[test]
    fn json_array_elements() {
        assert_eq!(
            frame(BodyFraming::JsonArray, &[b"1", b"{\"a\":[2]}", b"\"s\""]),
            b"[1,{\"a\":[2]},\"s\"]"
        );
        assert_eq!(frame(BodyFraming::JsonArray, &[]), b"[]");
        assert_eq!(
            frame(BodyFraming::JsonArray, &[b" {\"a\":\n1} "]),
            b"[ {\"a\":\n1} ]"
        );
        for bad in [&b"{"[..], b"", b"1 2", b"{\"a\":1}x", b"nul", b"\"\xff\""] {
            let e = BodyFraming::JsonArray.check(bad, "x").unwrap_err();
            assert!(e.starts_with("record is not"), "{bad:?}: {e}");
        }
        let e = BodyFraming::JsonArray.check(b"{\"a\":}", "x").unwrap_err();
        assert!(e.contains("line 1 column 6"), "{e}");
    }

    #[test]
    fn length_prefixed_frames() {
        assert_eq!(
            frame(BodyFraming::LengthPrefixed, &[b"ab", b"", b"c\nd"]),
            b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x03\x00\x00\x00c\nd"
        );
    }
}
