//! `ctl dead-letter list | requeue | drop [--sink NAME]`: what the operator
//! does with records a sink rejected for good. Every sink has its own
//! store; `--sink` may be left out when there is only one.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use spillway_actors::{AppendBatch, CommitTarget, PendingRecord};
use spillway_wab::deadletter::DeadLetter;
use spillway_wab::RecordMeta;
use tokio::sync::oneshot;

use super::AdminState;
use crate::sinks::DeadLetters;

/// The dead-letter store of sink `sink`, or of the only sink there is.
pub(super) fn store(state: &AdminState, sink: Option<&str>) -> Result<DeadLetters, String> {
    store_named(state, sink).map(|(_, store)| store)
}

/// [`store`], with the sink's name.
pub(super) fn store_named(
    state: &AdminState,
    sink: Option<&str>,
) -> Result<(String, DeadLetters), String> {
    let stores = state.dead_letters.lock().unwrap();
    let names = || stores.keys().cloned().collect::<Vec<_>>().join(", ");
    match sink {
        Some(name) => stores
            .get(name)
            .map(|s| (name.to_string(), s.clone()))
            .ok_or_else(|| format!("no sink {name:?} has dead letters here; sinks: {}", names())),
        None if stores.len() == 1 => {
            let (name, store) = stores.iter().next().unwrap();
            Ok((name.clone(), store.clone()))
        }
        None => Err(format!(
            "there are several sinks; say which with --sink NAME ({})",
            names()
        )),
    }
}

/// Every dead letter in the store, oldest first.
fn stored(store: &DeadLetters) -> Result<Vec<DeadLetter>, String> {
    store.lock().unwrap().list().map_err(|e| e.to_string())
}

/// How many dead letters `dead-letter list` shows unless told
/// (`--limit N`, 0 for all): a store of a million would not fit an answer.
pub(super) const LIST_LIMIT: usize = 100;

/// `dead-letter list`: the count, then a table for people of the oldest
/// `limit` (0: all): the id to requeue or drop it by, when it was
/// dead-lettered (RFC 3339, UTC), its size, its tier, the sink's reason
/// and the start of its payload, both cut to a width (with an ellipsis)
/// and the payload escaped.
pub(super) fn list(sink: &str, store: &DeadLetters, limit: usize) -> Result<String, String> {
    Ok(table_of(sink, &stored(store)?, limit))
}

/// How many of `count` a list shows with `limit` (0: all).
fn shown(count: usize, limit: usize) -> usize {
    if limit == 0 {
        count
    } else {
        count.min(limit)
    }
}

/// The text of `list` for the dead letters `all`, the oldest `limit`.
fn table_of(sink: &str, all: &[DeadLetter], limit: usize) -> String {
    let mut out = String::new();
    let n = shown(all.len(), limit);
    if n < all.len() {
        let _ = writeln!(
            out,
            "{} dead letters in sink {sink}; the oldest {n} shown (--limit N for more, 0 for all)",
            all.len()
        );
    } else {
        let _ = writeln!(out, "{} dead letters in sink {sink}", all.len());
    }
    if all.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = all[..n]
        .iter()
        .map(|l| {
            vec![
                format!("{}:{}", l.shard, l.seq),
                super::health::rfc3339(l.dead_lettered_unix_us / 1000),
                crate::top::bytes_text(l.payload.len() as u64),
                tier_name(l.tier).to_string(),
                cut(&l.reason, REASON_WIDTH),
                escaped_preview(&l.payload),
            ]
        })
        .collect();
    out.push_str(&crate::table::render(
        &["ID", "DEAD-LETTERED", "SIZE", "TIER", "REASON", "PAYLOAD"],
        &rows,
        &[2],
    ));
    out
}

/// The sink's reason is cut to this many characters in the table.
const REASON_WIDTH: usize = 48;
/// The payload preview of the table, in characters before escaping.
const PREVIEW_CHARS: usize = 32;

/// `text`, cut to `width` characters with an ellipsis.
fn cut(text: &str, width: usize) -> String {
    crate::top::ellipsize(&text.replace(['\n', '\r', '\t'], " "), width)
}

/// The start of a payload, quoted and escaped (a newline is `\n`, a byte
/// that is not UTF-8 shows as U+FFFD), with an ellipsis when cut.
fn escaped_preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let head: String = text.chars().take(PREVIEW_CHARS).collect();
    let mut s = format!("{head:?}");
    if text.chars().count() > PREVIEW_CHARS {
        s.push('…');
    }
    s
}

/// A tier byte as its name (`sync`, `batched`, `buffered`; `?` for a
/// byte no tier has).
pub fn tier_name(tier: u8) -> &'static str {
    spillway_protocol::Tier::from_byte(tier).map_or("?", spillway_protocol::Tier::name)
}

/// `dead-letter list --json`: the count of all, and the oldest `limit`
/// (0: all) with their identity, tier (its name), times, reason and the
/// start of their payload.
pub(super) fn list_json(store: &DeadLetters, limit: usize) -> Result<serde_json::Value, String> {
    let all = stored(store)?;
    let letters: Vec<serde_json::Value> = all[..shown(all.len(), limit)]
        .iter()
        .map(|l| {
            serde_json::json!({
                "id": format!("{}:{}", l.shard, l.seq),
                "shard": l.shard,
                "seq": l.seq,
                "tier": tier_name(l.tier),
                "arrival_unix_us": l.arrival_unix_us,
                "dead_lettered_unix_us": l.dead_lettered_unix_us,
                "bytes": l.payload.len(),
                "reason": l.reason,
                "payload_preview": preview(&l.payload),
            })
        })
        .collect();
    Ok(serde_json::json!({ "count": all.len(), "shown": letters.len(), "dead_letters": letters }))
}

/// The first 60 characters of a payload, as lossy UTF-8.
fn preview(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).chars().take(60).collect()
}

/// Which dead letters a requeue/drop applies to.
pub(super) enum Selection {
    All,
    Ids(Vec<(u32, u64)>),
}

impl Selection {
    pub(super) fn parse(words: &[&str]) -> Result<Selection, String> {
        match words {
            [] => Err("say which dead letters: all, or SHARD:SEQ identities as shown by `dead-letter list`".into()),
            ["all"] => Ok(Selection::All),
            ids => ids
                .iter()
                .map(|w| {
                    let (s, q) = w.split_once(':').ok_or_else(|| format!("{w:?} is not SHARD:SEQ"))?;
                    Ok((s.parse().map_err(|_| format!("bad shard in {w:?}"))?, q.parse().map_err(|_| format!("bad seq in {w:?}"))?))
                })
                .collect::<Result<Vec<_>, String>>()
                .map(Selection::Ids),
        }
    }

    fn matches(&self, l: &DeadLetter) -> bool {
        match self {
            Selection::All => true,
            Selection::Ids(ids) => ids.contains(&(l.shard, l.seq)),
        }
    }
}

/// `dead-letter drop`: remove the selected dead letters for good.
pub(super) fn drop(store: &DeadLetters, sel: Selection) -> Result<usize, String> {
    let removed = store
        .lock()
        .unwrap()
        .remove_where(|l| sel.matches(l))
        .map_err(|e| e.to_string())?;
    Ok(removed.len())
}

/// Receives the commit of a requeued batch (on the flusher's thread).
struct RequeueWaiter(Mutex<Option<oneshot::Sender<Result<u64, spillway_protocol::NackReason>>>>);

impl CommitTarget for RequeueWaiter {
    fn committed(&self, _token: u64, result: Result<u64, spillway_protocol::NackReason>) {
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(result);
        }
    }
}

/// Push the selected dead letters back into their shards (as new records,
/// Sync, in their original order), then remove them from the store.
pub(super) async fn requeue(
    state: &AdminState,
    sink: Option<&str>,
    store: &DeadLetters,
    sel: Selection,
) -> Result<usize, String> {
    if state.board.sinks().len() > 1 {
        // Every sink reads the WAB: a record pushed there again would
        // reach the sinks that already have it. Send it to this one alone.
        return to_one_sink(state, sink, store, sel);
    }
    let all = stored(store)?;
    let chosen: Vec<DeadLetter> = all.into_iter().filter(|l| sel.matches(l)).collect();
    if chosen.is_empty() {
        return Ok(0);
    }
    let shards = state.shards.len() as u32;
    let mut by_shard: Vec<Vec<&DeadLetter>> = vec![Vec::new(); shards as usize];
    for l in &chosen {
        by_shard[(l.shard % shards) as usize].push(l);
    }
    // Requeued records are admitted like a producer's push (Overloaded at
    // wab.wab_bytes_max, the shard's refusal while it cannot write), every
    // shard before any is pushed, so a refusal requeues nothing.
    for (i, letters) in by_shard.iter().enumerate() {
        if letters.is_empty() {
            continue; // a shard that gets nothing need not be able to write
        }
        let bytes = letters.iter().map(|l| l.payload.len() as u64).sum();
        if let Err(reason) = state.shards[i].admit(bytes, letters.len(), 0) {
            state.stats.count_nack(reason);
            return Err(format!(
                "shard {i} refused the requeue: {} (retryable; nothing was requeued, try again once delivery has freed space)",
                reason.name()
            ));
        }
    }
    let arrival = spillway_wab::format::now_unix_us();
    let mut requeued: Vec<(u32, u64)> = Vec::with_capacity(chosen.len());
    for (i, letters) in by_shard.iter().enumerate() {
        if letters.is_empty() {
            continue;
        }
        let meta = RecordMeta {
            tier: spillway_protocol::Tier::Sync.as_byte(),
            arrival_unix_us: arrival,
        }
        .pack();
        let records: Vec<PendingRecord> = letters
            .iter()
            .map(|l| PendingRecord {
                payload: Bytes::clone(&l.payload),
                meta,
            })
            .collect();
        let bytes = records.iter().map(|r| r.payload.len() as u64).sum();
        let (tx, rx) = oneshot::channel();
        let waiter = Arc::new(RequeueWaiter(Mutex::new(Some(tx))));
        state.shards[i].push(AppendBatch::new(records, bytes, true, 0, waiter));
        let failed = match rx.await {
            Ok(Ok(_)) => None,
            Ok(Err(reason)) => Some(format!("shard {i} refused the requeued records: {reason}")),
            Err(_) => Some(format!("shard {i} went away during the requeue")),
        };
        if let Some(why) = failed {
            // What earlier shards took is pending again: out of the store
            // with it, or it would be delivered twice.
            remove(store, &requeued)?;
            return Err(format!("{why} ({} requeued before that)", requeued.len()));
        }
        requeued.extend(letters.iter().map(|l| (l.shard, l.seq)));
    }
    remove(store, &requeued)?;
    Ok(chosen.len())
}

/// With several sinks: move the selected dead letters into the sink's
/// requeue store (fsynced), then out of its dead-letter store; its cursors
/// deliver them to it alone, between batches. A crash between the two
/// steps leaves a record in both: delivered, and listed once more.
fn to_one_sink(
    state: &AdminState,
    sink: Option<&str>,
    store: &DeadLetters,
    sel: Selection,
) -> Result<usize, String> {
    let name = sink.ok_or("there are several sinks; say which with --sink NAME")?;
    let requeue = state
        .requeue
        .lock()
        .unwrap()
        .get(name)
        .cloned()
        .ok_or_else(|| format!("sink {name:?} is not configured: its dead letters can be listed or dropped, not requeued"))?;
    let chosen: Vec<DeadLetter> = stored(store)?
        .into_iter()
        .filter(|l| sel.matches(l))
        .collect();
    if chosen.is_empty() {
        return Ok(0);
    }
    requeue
        .add(&chosen)
        .map_err(|e| format!("writing the requeue store of sink {name}: {e}"))?;
    let ids: Vec<(u32, u64)> = chosen.iter().map(|l| (l.shard, l.seq)).collect();
    remove(store, &ids)?;
    Ok(chosen.len())
}

/// Take requeued dead letters (now pending again) out of the store.
fn remove(store: &DeadLetters, ids: &[(u32, u64)]) -> Result<(), String> {
    if ids.is_empty() {
        return Ok(());
    }
    store
        .lock()
        .unwrap()
        .remove_where(|l| ids.contains(&(l.shard, l.seq)))
        .map(|_| ())
        .map_err(|e| format!("requeued, but removing them from the dead-letter store failed (they may be delivered twice): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_previews_and_reasons_read_well() {
        use crate::top::bytes_text;
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(1023), "1023 B");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(4 << 20), "4.0 MiB");
        assert_eq!(bytes_text(3 << 30), "3.0 GiB");
        assert_eq!(escaped_preview(b"a\nb\x00c"), "\"a\\nb\\0c\"");
        let long = "x".repeat(40);
        assert_eq!(
            escaped_preview(long.as_bytes()),
            format!("\"{}\"…", "x".repeat(32))
        );
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("two\nlines", 20), "two lines");
        assert_eq!(cut(&"r".repeat(60), 48).chars().count(), 48);
        assert!(cut(&"r".repeat(60), 48).ends_with('…'));
    }

    /// The table of known dead letters is the checked-in
    /// `tests/golden/dead-letter-list.txt`; `SPILLWAY_BLESS=1` rewrites it.
    #[test]
    fn the_table_of_known_dead_letters_is_the_golden_one() {
        let letter = |shard, seq, tier, secs: u64, reason: &str, payload: &[u8]| DeadLetter {
            shard,
            seq,
            tier,
            arrival_unix_us: 0,
            dead_lettered_unix_us: secs * 1_000_000,
            reason: reason.into(),
            payload: bytes::Bytes::copy_from_slice(payload),
        };
        let all = [
            letter(
                0,
                7,
                1,
                1_796_342_400,
                "HTTP 400: {\"error\":\"field user_id is required\"}",
                b"{\"event\":\"signup\"}",
            ),
            letter(
                1,
                1_234_567,
                2,
                1_796_342_461,
                "retried for 60 s: connection refused (os error 111)",
                &[0xff, b'\n', b'\t', 0],
            ),
            letter(
                0,
                8,
                3,
                1_796_346_000,
                "rejected by plugin: payload is not valid JSON",
                "x".repeat(70_000).as_bytes(),
            ),
        ];
        let got = table_of("warehouse", &all, LIST_LIMIT);
        crate::golden::check("dead-letter-list.txt", &got);
        assert_eq!(
            table_of("warehouse", &[], LIST_LIMIT),
            "0 dead letters in sink warehouse\n"
        );
        let two = table_of("warehouse", &all, 2);
        assert!(
            two.starts_with("3 dead letters in sink warehouse; the oldest 2 shown (--limit N for more, 0 for all)\n"),
            "{two}"
        );
        assert_eq!(
            two.lines().count(),
            1 + 1 + 2,
            "the header, the column names, two rows:\n{two}"
        );
        assert_eq!(table_of("warehouse", &all, 0), got, "0 shows all");
    }
}
