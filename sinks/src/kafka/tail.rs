//! `spillway ctl sink tail` for a kafka sink: the newest committed records
//! of the topic, read as a `read_committed` consumer would see them, with
//! no group joined and no offset committed.

use std::collections::VecDeque;

use rdkafka::message::{Headers, Message};

use super::client::base_config;
use super::config::KafkaSettings;
use super::position::CommittedReader;
use crate::sink_type::ReadBack;
use crate::SinkError;

/// How many times a partition's window is widened when aborted
/// transactions and commit markers leave it short of `limit` records.
const WIDENINGS: u32 = 4;

/// One committed record, where the topic keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    timestamp_ms: i64,
    partition: i32,
    offset: i64,
    record: Option<(u32, u64)>,
    payload: Vec<u8>,
}

/// The last `limit` committed records of the sink's topic, oldest first:
/// the last `limit` of each partition, merged by their timestamps (Kafka
/// orders records within a partition only).
pub(crate) fn read_back(
    s: &KafkaSettings,
    table: &str,
    limit: usize,
) -> Result<Vec<ReadBack>, SinkError> {
    let failed = |what: String| SinkError::Build {
        reason: format!("{table}: {what}"),
    };
    let brokers = s.brokers.join(", ");
    let config = base_config(s, table)?;
    let reader = CommittedReader::new(&config, "spillway-tail").map_err(failed)?;
    let wait = s.connect_timeout;
    let topic = s.topic.as_str();
    let partitions = match reader.partitions(topic, wait) {
        Ok((Some(n), _)) => n,
        Ok((None, _)) => return Err(failed(format!("no topic {topic:?} on {brokers}"))),
        Err(e) => return Err(failed(format!("cannot reach {brokers}: {e}"))),
    };
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    for partition in 0..partitions {
        let (low, high) = reader.bounds(topic, partition, wait).map_err(failed)?;
        // Each transaction leaves a commit marker on the partition: twice
        // `limit` offsets hold `limit` records unless transactions were
        // aborted, and the window widens then.
        let mut window = (limit as i64).saturating_mul(2);
        let mut widened = 0;
        let newest = loop {
            let from = high.saturating_sub(window).max(low);
            let mut newest: VecDeque<Found> = VecDeque::with_capacity(limit);
            let what = format!("reading the newest records of {topic}/{partition}");
            reader
                .read(topic, partition, from..high, wait, &what, |m| {
                    if newest.len() == limit {
                        newest.pop_front();
                    }
                    newest.push_back(Found {
                        timestamp_ms: m.timestamp().to_millis().unwrap_or(0),
                        partition,
                        offset: m.offset(),
                        record: identity(m),
                        payload: m.payload().unwrap_or_default().to_vec(),
                    });
                    Ok(())
                })
                .map_err(failed)?;
            if newest.len() >= limit || from == low || widened == WIDENINGS {
                break newest;
            }
            window = window.saturating_mul(4);
            widened += 1;
        };
        found.extend(newest);
    }
    Ok(merge(found, limit)
        .into_iter()
        .map(|f| ReadBack {
            at: format!("{topic}/{}@{}", f.partition, f.offset),
            record: f.record,
            payload: f.payload,
        })
        .collect())
}

/// The record's (shard, seq), from the headers the sink writes.
fn identity(m: &impl Message) -> Option<(u32, u64)> {
    let headers = m.headers()?;
    let value = |name: &str| {
        headers
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| std::str::from_utf8(h.value?).ok())
            .map(str::to_owned)
    };
    let shard = value("spillway-shard")?.parse().ok()?;
    let seq = value("spillway-seq")?.parse().ok()?;
    Some((shard, seq))
}

/// The newest `limit` of `found` (each partition's records in offset
/// order), oldest first: by timestamp, then partition and offset. A
/// partition's own order is kept: a record stamped earlier than one
/// before it on its partition (two producers' clocks) sorts as if
/// stamped with that one's time (only the order uses the times).
fn merge(mut found: Vec<Found>, limit: usize) -> Vec<Found> {
    for i in 1..found.len() {
        if found[i].partition == found[i - 1].partition {
            found[i].timestamp_ms = found[i].timestamp_ms.max(found[i - 1].timestamp_ms);
        }
    }
    found.sort_by_key(|f| (f.timestamp_ms, f.partition, f.offset));
    found.split_off(found.len().saturating_sub(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(timestamp_ms: i64, partition: i32, offset: i64) -> Found {
        Found {
            timestamp_ms,
            partition,
            offset,
            record: None,
            payload: Vec::new(),
        }
    }

    #[test]
    fn the_newest_across_partitions_come_oldest_first() {
        let found = vec![
            at(5, 0, 10),
            at(9, 0, 11),
            at(7, 1, 3),
            at(9, 1, 4),
            at(1, 2, 0),
        ];
        let place = |v: Vec<Found>| {
            v.iter()
                .map(|f| (f.partition, f.offset))
                .collect::<Vec<_>>()
        };
        assert_eq!(place(merge(found.clone(), 3)), [(1, 3), (0, 11), (1, 4)]);
        assert_eq!(place(merge(found.clone(), 10)).len(), 5);
        assert!(merge(found, 0).is_empty());
        // Partition 0's second record was stamped before its first (two
        // producers' clocks): it still comes after it.
        let skewed = vec![at(8, 0, 20), at(3, 0, 21), at(5, 1, 7)];
        assert_eq!(place(merge(skewed, 3)), [(1, 7), (0, 20), (0, 21)]);
    }
}
