//! What an ingest request asks for, read from its target and body: the
//! tier from the query string, and the records from the body (NDJSON: one
//! record per line; `application/octet-stream`: the body is one record).
//! Every refusal says why, naming the parameter, line or limit.

use bytes::Bytes;
use spillway_protocol::Tier;

/// A request refused before anything was written: its status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
        }
    }
}

/// The tier of `?tier=sync|batched|buffered` (Sync when absent). Any other
/// parameter, a tier by another name, or `tier` given twice is a 400
/// naming it: with two tiers the client's intent is unknown, and taking
/// the last would quietly weaken `tier=sync&tier=buffered`.
pub fn tier_of(query: Option<&str>) -> Result<Tier, Refusal> {
    let mut tier = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "tier" => {
                if tier.is_some() {
                    return Err(Refusal::new(
                        400,
                        format!(
                            "query parameter \"tier\" is repeated (tier={value:?} again): give one tier"
                        ),
                    ));
                }
                tier = Some(match value {
                    "sync" => Tier::Sync,
                    "batched" => Tier::Batched,
                    "buffered" => Tier::Buffered,
                    other => {
                        return Err(Refusal::new(
                            400,
                            format!("tier={other:?} is not a tier: use sync, batched or buffered"),
                        ))
                    }
                })
            }
            other => {
                return Err(Refusal::new(
                    400,
                    format!("unknown query parameter {other:?}: only tier=sync|batched|buffered"),
                ))
            }
        }
    }
    Ok(tier.unwrap_or(Tier::Sync))
}

/// How the body holds its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One record per line (`\n`, a `\r` before it dropped); a last line
    /// without a newline counts.
    Lines,
    /// The whole body is one record (`application/octet-stream`).
    Whole,
}

impl Layout {
    /// `application/octet-stream` is one record; anything else (NDJSON,
    /// text, curl's default form type, none) is read as lines.
    pub fn of(content_type: Option<&[u8]>) -> Layout {
        let essence = content_type
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        match essence.as_deref() {
            Some("application/octet-stream") => Layout::Whole,
            _ => Layout::Lines,
        }
    }
}

/// The records of `body` (slices of it, no copy): each one non-empty and
/// at most `payload_bytes_max` bytes. An empty record is a 400 naming its
/// line, a record over the cap a 413 naming its line and the cap.
pub fn records_of(
    body: &Bytes,
    layout: Layout,
    payload_bytes_max: u32,
) -> Result<Vec<Bytes>, Refusal> {
    if body.is_empty() {
        return Err(Refusal::new(400, "empty body: no record to store"));
    }
    let too_big = |line: Option<usize>, len: usize| {
        let which = line.map_or("the record".to_string(), |l| format!("line {l}"));
        Refusal::new(
            413,
            format!(
                "{which} is {len} bytes, over server.payload_bytes_max ({payload_bytes_max} bytes)"
            ),
        )
    };
    if layout == Layout::Whole {
        if body.len() > payload_bytes_max as usize {
            return Err(too_big(None, body.len()));
        }
        return Ok(vec![body.clone()]);
    }
    let mut records = Vec::new();
    let mut start = 0;
    let mut line = 0;
    while start < body.len() {
        line += 1;
        let end = memchr_newline(&body[start..]).map_or(body.len(), |i| start + i);
        let next = end + 1;
        let mut stop = end;
        if stop > start && body[stop - 1] == b'\r' {
            stop -= 1;
        }
        if stop == start {
            return Err(Refusal::new(
                400,
                format!("line {line} is empty: every line must hold a record (no blank lines)"),
            ));
        }
        if stop - start > payload_bytes_max as usize {
            return Err(too_big(Some(line), stop - start));
        }
        records.push(body.slice(start..stop));
        start = next;
    }
    Ok(records)
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(r: &[Bytes]) -> Vec<&str> {
        r.iter().map(|b| std::str::from_utf8(b).unwrap()).collect()
    }

    #[test]
    fn tiers_by_name_and_sync_by_default() {
        assert_eq!(tier_of(None), Ok(Tier::Sync));
        assert_eq!(tier_of(Some("tier=buffered")), Ok(Tier::Buffered));
        assert_eq!(tier_of(Some("tier=batched")), Ok(Tier::Batched));
        let e = tier_of(Some("tier=fast")).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.message.contains("\"fast\""), "{e:?}");
        let e = tier_of(Some("tier=sync&shard=2")).unwrap_err();
        assert!(e.message.contains("\"shard\""), "{e:?}");
    }

    #[test]
    fn a_repeated_tier_is_refused_naming_it() {
        for query in ["tier=sync&tier=buffered", "tier=sync&tier=sync"] {
            let e = tier_of(Some(query)).unwrap_err();
            assert_eq!(e.status, 400, "{query}: {e:?}");
            assert!(e.message.contains("\"tier\" is repeated"), "{query}: {e:?}");
        }
    }

    #[test]
    fn lines_are_records_and_a_last_newline_is_optional() {
        let body = Bytes::from_static(b"a\r\nbc\ndef");
        assert_eq!(
            texts(&records_of(&body, Layout::Lines, 16).unwrap()),
            ["a", "bc", "def"]
        );
        let body = Bytes::from_static(b"a\nbc\n");
        assert_eq!(
            texts(&records_of(&body, Layout::Lines, 16).unwrap()),
            ["a", "bc"]
        );
        let body = Bytes::from_static(b"a\n\nb\n");
        let e = records_of(&body, Layout::Lines, 16).unwrap_err();
        assert_eq!(
            (e.status, e.message.contains("line 2")),
            (400, true),
            "{e:?}"
        );
        let body = Bytes::from_static(b"a\n12345\n");
        let e = records_of(&body, Layout::Lines, 4).unwrap_err();
        assert_eq!(
            (e.status, e.message.contains("line 2 is 5 bytes")),
            (413, true),
            "{e:?}"
        );
    }

    #[test]
    fn a_whole_body_is_one_record_newlines_and_all() {
        let body = Bytes::from_static(b"a\n\nb");
        assert_eq!(
            records_of(&body, Layout::Whole, 16).unwrap(),
            std::slice::from_ref(&body)
        );
        assert_eq!(records_of(&body, Layout::Whole, 3).unwrap_err().status, 413);
        assert_eq!(
            records_of(&Bytes::new(), Layout::Whole, 3)
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            Layout::of(Some(b"application/octet-stream; x=1")),
            Layout::Whole
        );
        assert_eq!(Layout::of(Some(b"application/x-ndjson")), Layout::Lines);
        assert_eq!(Layout::of(None), Layout::Lines);
    }
}
