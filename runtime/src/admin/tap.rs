//! `ctl tap`: records as they are acknowledged (or as one sink confirms
//! them), streamed over the admin socket until `--limit` records were
//! shown or the client goes away.
//!
//! The reply is `ok`, then one line per record, and now and then a line
//! of what the tap missed; never an answer that waits for the whole. What
//! the producers' side does (the rate, the bounded queue, the counts) is
//! `spillway_actors::tap`'s: a reader slower than the records loses
//! lines, counted, and never slows a push.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use spillway_actors::{ShardQueue, Tap, TapFilter, Tapped};
use spillway_protocol::Tier;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{take_option, AdminState};

/// `--rate` when not given: records shown a second at most.
pub const RATE_DEFAULT: u32 = 100;
/// How often a line says what the tap missed (when it missed more).
const COUNTS_EVERY: Duration = Duration::from_secs(1);
/// Records written to the socket in one write at most.
const LINES_PER_WRITE: usize = 256;

/// What `tap` was asked for.
#[derive(Debug)]
struct Request {
    filter: TapFilter,
    limit: Option<u64>,
    json: bool,
}

/// `tap [--sink NAME] [--tier T] [--limit N] [--rate N] [--json]`.
fn parse(words: &[&str], state: &AdminState) -> Result<Request, String> {
    let mut words = words.to_vec();
    let json = words.last() == Some(&"--json");
    if json {
        words.pop();
    }
    let sink = take_option(&mut words, "--sink")?.map(str::to_string);
    let tier = take_option(&mut words, "--tier")?
        .map(|t| {
            [Tier::Sync, Tier::Batched, Tier::Buffered]
                .into_iter()
                .find(|x| x.name() == t)
                .map(Tier::as_byte)
                .ok_or_else(|| format!("--tier {t:?}: expected sync, batched or buffered"))
        })
        .transpose()?;
    let count = |name: &str, v: Option<&str>| {
        v.map(|n| {
            n.parse::<u64>()
                .map_err(|_| format!("{name} {n:?}: not a count"))
        })
        .transpose()
    };
    let limit = count("--limit", take_option(&mut words, "--limit")?)?.filter(|n| *n > 0);
    let rate = match count("--rate", take_option(&mut words, "--rate")?)? {
        None => Some(RATE_DEFAULT),
        Some(0) => None,
        Some(n) => Some(u32::try_from(n).map_err(|_| format!("--rate {n}: too large"))?),
    };
    if let Some(extra) = words.get(1) {
        return Err(format!(
            "tap: unexpected {extra:?}; usage: tap [--sink NAME] [--tier sync|batched|buffered] [--limit N] [--rate N] [--json]"
        ));
    }
    if let Some(name) = &sink {
        super::sinks::exists(state, name)?;
    }
    Ok(Request {
        filter: TapFilter { tier, sink, rate },
        limit,
        json,
    })
}

/// The tap watches every shard while this lives.
struct Watching {
    shards: Vec<Arc<ShardQueue>>,
    tap: Arc<Tap>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        for q in &self.shards {
            q.taps.unwatch(&self.tap);
        }
    }
}

/// Serve `tap` on an admin connection: `words` is the command line split
/// (its first word `tap`); `rd` tells when the client goes away.
pub(super) async fn serve<R, W>(words: &[&str], mut rd: R, mut wr: W, state: &AdminState)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let request = match parse(words, state) {
        Ok(r) => r,
        Err(e) => {
            let _ = wr.write_all(spillway_ctl::reply(Err(e)).as_bytes()).await;
            let _ = wr.shutdown().await;
            return;
        }
    };
    let (tap, mut rx) = Tap::new(request.filter.clone());
    let watching = Watching {
        shards: state.shards.clone(),
        tap: tap.clone(),
    };
    for q in &watching.shards {
        q.taps.watch(tap.clone());
    }
    tracing::info!(sink = ?request.filter.sink, "ctl tap: a client watches records");
    if wr
        .write_all(spillway_ctl::reply(Ok(String::new())).as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let counts = rx.counts.clone();
    let missed = || {
        (
            counts.skipped.load(Ordering::Relaxed),
            counts.dropped.load(Ordering::Relaxed),
        )
    };
    let mut shown = 0u64;
    let mut said = (0, 0);
    let mut tick = tokio::time::interval(COUNTS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scratch = [0u8; 64];
    let mut out = String::new();
    let done = |shown: u64| request.limit.is_some_and(|l| shown >= l);
    while !done(shown) {
        tokio::select! {
            first = rx.recv() => {
                let Some(first) = first else { break };
                out.clear();
                line(&mut out, &first, &request);
                shown += 1;
                let mut lines = 1;
                while lines < LINES_PER_WRITE && out.len() < 64 * 1024 && !done(shown) {
                    let Some(t) = rx.try_recv() else { break };
                    line(&mut out, &t, &request);
                    shown += 1;
                    lines += 1;
                }
                if wr.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
            }
            _ = tick.tick() => {
                let now = missed();
                if now != said {
                    said = now;
                    if wr.write_all(counts_line(now, None, request.json).as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
            n = rd.read(&mut scratch) => {
                // The client closed (or wrote past its command): done.
                if !matches!(n, Ok(k) if k > 0) {
                    return;
                }
            }
        }
    }
    drop(watching);
    let _ = wr
        .write_all(counts_line(missed(), Some(shown), request.json).as_bytes())
        .await;
    let _ = wr.shutdown().await;
}

/// One record's line.
fn line(out: &mut String, t: &Tapped, request: &Request) {
    let tier = Tier::from_byte(t.tier).map_or("?", Tier::name);
    if request.json {
        let mut v = serde_json::json!({
            "shard": t.shard,
            "seq": t.seq,
            "tier": tier,
            "arrival_unix_us": t.arrival_unix_us,
        });
        if let Some(sink) = &request.filter.sink {
            v["sink"] = sink.as_str().into();
        }
        crate::payload::set_json(&mut v, &t.payload);
        let _ = writeln!(out, "{v}");
        return;
    }
    let _ = write!(out, "{}:{} {tier} ", t.shard, t.seq);
    crate::payload::push_text(out, &t.payload);
    out.push('\n');
}

/// What the tap missed so far (and, at the end, what it showed). In text
/// a `# ` line (`ctl tap` prints it on stderr), in JSON an object without
/// `seq`.
fn counts_line((skipped, dropped): (u64, u64), shown: Option<u64>, json: bool) -> String {
    if json {
        let mut v = serde_json::json!({ "skipped": skipped, "dropped": dropped });
        if let Some(n) = shown {
            v["shown"] = n.into();
            v["end"] = true.into();
        }
        return format!("{v}\n");
    }
    let mut s = String::from("# ");
    if let Some(n) = shown {
        let _ = write!(s, "tap ended: {n} records shown; ");
    }
    let _ = writeln!(
        s,
        "{skipped} skipped over --rate, {dropped} dropped (this reader was slower than the records)"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn request(json: bool) -> Request {
        Request {
            filter: TapFilter::default(),
            limit: None,
            json,
        }
    }

    fn tapped(payload: &'static [u8]) -> Tapped {
        Tapped {
            shard: 2,
            seq: 17,
            tier: 1,
            arrival_unix_us: 5,
            payload: Bytes::from_static(payload),
        }
    }

    #[test]
    fn a_text_line_escapes_what_would_break_it_and_shows_bytes_as_base64() {
        let mut out = String::new();
        line(&mut out, &tapped(b"a\nb\\c \"d\""), &request(false));
        assert_eq!(out, "2:17 sync a\\nb\\\\c \"d\"\n");
        out.clear();
        line(&mut out, &tapped(&[0xff, 0x00, 0x61]), &request(false));
        assert_eq!(out, "2:17 sync [3 bytes, not UTF-8] base64:/wBh\n");
    }

    #[test]
    fn a_json_line_has_the_payload_as_text_or_base64() {
        let mut out = String::new();
        line(&mut out, &tapped(b"{\"k\":1}"), &request(true));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["payload"], "{\"k\":1}");
        assert_eq!(v["tier"], "sync");
        assert_eq!(v["seq"], 17);
        out.clear();
        line(&mut out, &tapped(&[0xff, 0x00, 0x61]), &request(true));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["payload_base64"], "/wBh");
        assert!(v.get("payload").is_none());
    }
}
