//! The delivery keys every sink table has, whatever its type: batching,
//! retries, the build deadline, where a sink added at run time starts, how
//! far it may lag and what then, batches in flight ([`DeliveryConfig`]);
//! and the range checks every type's keys use. The shared vocabulary: the
//! sink folders use it and nothing else of the table's reading, so they do
//! not depend on `config` (which depends on the registry, which depends on
//! them).

use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use sink_sdk::keys::{Allowed, DefaultValue, Key, Unit};
use sink_sdk::Limits;

pub use crate::error::KeyProblem;
pub(crate) use sink_sdk::units::{GIB, KIB, MIB};

pub const DEFAULT_MAX_RECORDS: u32 = 1000;
pub const MAX_RECORDS_RANGE: RangeInclusive<u32> = 1..=100_000;
pub const DEFAULT_MAX_BYTES: u64 = 4 * MIB;
pub const MAX_BYTES_RANGE: RangeInclusive<u64> = KIB..=64 * MIB;
pub const DEFAULT_LINGER_MS: u64 = 5;
pub const LINGER_MS_RANGE: RangeInclusive<u64> = 0..=10_000;
pub const DEFAULT_RETRY_INITIAL_MS: u64 = 100;
pub const RETRY_INITIAL_MS_RANGE: RangeInclusive<u64> = 1..=60_000;
pub const DEFAULT_RETRY_MAX_MS: u64 = 30_000;
pub const RETRY_MAX_MS_RANGE: RangeInclusive<u64> = 10..=3_600_000;
/// 0 means "retry forever"; any other value must lie in this range.
pub const MAX_RETRY_DURATION_MS_RANGE: RangeInclusive<u64> = 1_000..=604_800_000;
/// How long building and health-checking a new sink may take (a reload, a
/// start, `check`): long enough for a TLS handshake to a far endpoint or a
/// database login, short enough that a stuck one is refused while the
/// operator still waits on `ctl reload`.
pub const DEFAULT_BUILD_TIMEOUT_MS: u64 = 10_000;
pub const BUILD_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
/// 0 means "no limit"; any other value must lie in this range: below
/// 1 MiB a sink would skip at every hiccup, past 1 TiB the limit is none.
pub const LAG_BYTES_MAX_RANGE: RangeInclusive<u64> = MIB..=1024 * GIB;
pub const BATCHES_IN_FLIGHT_RANGE: RangeInclusive<u32> = 1..=64;
/// How long the durable copy of a cursor may lag: a power cut may offer
/// again what was confirmed in the last 100 ms (a crash of the process
/// only the batches in flight: the file is written after every batch).
/// Measured with `spillway bench --scenario batch_durable_n256` and the
/// noop sink: the cursor's fdatasync after every batch made the flusher's
/// own fdatasync wait behind it (see docs/benchmarks.md).
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u64 = 100;
/// 0 fdatasyncs the cursor after every confirmed batch; at most a minute
/// between fdatasyncs.
pub const CHECKPOINT_INTERVAL_MS_RANGE: RangeInclusive<u64> = 0..=60_000;
pub const DEFAULT_BATCHES_IN_FLIGHT_MAX: u32 = 16;
pub const BATCHES_IN_FLIGHT_MAX_RANGE: RangeInclusive<u32> = 2..=256;

/// Where a sink starts reading when it has no cursor of its own: added
/// while the daemon runs, or its cursor file is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartAt {
    /// At the end of what the buffer holds: only records that arrive from
    /// now on.
    #[default]
    End,
    /// At the oldest record the buffer still holds.
    Oldest,
}

/// What a sink does when it falls `lag_bytes_max` behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLag {
    /// Keep every record: the buffer holds them (and grows) until the sink
    /// catches up.
    #[default]
    Block,
    /// Skip ahead: the records past the limit are dropped for this sink,
    /// counted and logged, so the buffer is not held by it.
    Skip,
}

/// How many batches a sink may have in flight at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Exactly this many (1..=64). 1 keeps batches in order.
    Fixed(u32),
    /// As many as the sink takes without slowing down, up to
    /// `batches_in_flight_max`.
    Adaptive,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency::Fixed(1)
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Concurrency::Fixed(n) => write!(f, "{n}"),
            Concurrency::Adaptive => f.write_str("\"adaptive\""),
        }
    }
}

/// An integer or the string `"adaptive"`; the range is the check's.
impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ConcurrencyVisitor;

        impl Visitor<'_> for ConcurrencyVisitor {
            type Value = Concurrency;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer 1..=64 or the string \"adaptive\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Concurrency, E> {
                u32::try_from(v)
                    .map(Concurrency::Fixed)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Concurrency, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Concurrency, E> {
                match v {
                    "adaptive" => Ok(Concurrency::Adaptive),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }

        deserializer.deserialize_any(ConcurrencyVisitor)
    }
}

/// The delivery keys: how the drain batches, retries, starts, bounds its
/// lag and overlaps batches. Every type has them.
///
/// `start`, `lag_bytes_max`, `on_lag`, `batches_in_flight` and
/// `batches_in_flight_max` are read and checked here; the drain that acts
/// on them is the multi-sink drain's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// Most records in one batch. Default 1000, range 1..=100000.
    pub max_records: u32,
    /// Most payload bytes in one batch (a single larger record is still sent
    /// alone). Default 4194304 (4 MiB), range 1 KiB..=64 MiB.
    pub max_bytes: u64,
    /// How long the drain waits for more records before sending a batch that
    /// is not full, in milliseconds. Default 5, range 0..=10000.
    pub linger_ms: u64,
    /// First backoff after a transient failure, in milliseconds; it doubles
    /// (with jitter) on each further failure. Default 100, range 1..=60000.
    pub retry_initial_ms: u64,
    /// Longest backoff between two attempts, in milliseconds. Default 30000,
    /// range 10..=3600000, and at least `retry_initial_ms`.
    pub retry_max_ms: u64,
    /// After a batch has failed transiently for this long, in milliseconds,
    /// it is dead-lettered. Default 0: retry forever. Otherwise
    /// 1000..=604800000 (7 days).
    pub max_retry_duration_ms: u64,
    /// Deadline for building a new sink and running its health check, in
    /// milliseconds (at a reload, at start, in `check`). Past it the new
    /// sink is refused and the running one keeps delivering. Default 10000,
    /// range 100..=600000.
    pub build_timeout_ms: u64,
    /// Where a sink starts reading when it has no cursor: one added while
    /// the daemon runs, or whose cursor is missing. `"end"` (default): only
    /// records that arrive from then on; `"oldest"`: the oldest record the
    /// buffer still holds.
    pub start: StartAt,
    /// How far, in bytes of buffered records, this sink may fall behind the
    /// newest record before `on_lag` applies. Default 0: no limit. Otherwise
    /// 1048576..=1099511627776 (1 MiB..=1 TiB).
    pub lag_bytes_max: u64,
    /// At `lag_bytes_max`: `"block"` (default) keeps every record for this
    /// sink, so the buffer grows until it catches up (and, full, slows the
    /// producers); `"skip"` skips this sink ahead, counting and logging the
    /// records it never receives. `"skip"` needs `lag_bytes_max`.
    pub on_lag: OnLag,
    /// Batches in flight at once: an integer 1..=64, or `"adaptive"` (as
    /// many as the sink takes without slowing down, up to
    /// `batches_in_flight_max`). Default 1. Above 1 (and with
    /// `"adaptive"`) batches may be delivered out of order; records within
    /// a batch keep theirs.
    pub batches_in_flight: Concurrency,
    /// `batches_in_flight = "adaptive"` only: the most batches in flight.
    /// Default 16, range 2..=256.
    pub batches_in_flight_max: Option<u32>,
    /// Longest the durable copy of the sink's cursor file may lag behind
    /// its confirmed batches, in milliseconds (the file itself is written
    /// after every confirmed batch). 0: fdatasynced after every batch.
    /// Range 0..=60000.
    pub checkpoint_interval_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            max_records: DEFAULT_MAX_RECORDS,
            max_bytes: DEFAULT_MAX_BYTES,
            linger_ms: DEFAULT_LINGER_MS,
            retry_initial_ms: DEFAULT_RETRY_INITIAL_MS,
            retry_max_ms: DEFAULT_RETRY_MAX_MS,
            max_retry_duration_ms: 0,
            build_timeout_ms: DEFAULT_BUILD_TIMEOUT_MS,
            start: StartAt::default(),
            lag_bytes_max: 0,
            on_lag: OnLag::default(),
            batches_in_flight: Concurrency::default(),
            batches_in_flight_max: None,
            checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
        }
    }
}

impl DeliveryConfig {
    /// Every key described for the reference (docs, `spillway.toml(5)`),
    /// from the same defaults and ranges the check uses.
    pub(crate) const REFERENCE: &'static [Key] = &[
        Key {
            name: "sink.max_records",
            default: DefaultValue::Int(DEFAULT_MAX_RECORDS as u64),
            allowed: Allowed::Range {
                min: *MAX_RECORDS_RANGE.start() as u64,
                max: *MAX_RECORDS_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"Most records in one batch."#,
        },
        Key {
            name: "sink.max_bytes",
            default: DefaultValue::Int(DEFAULT_MAX_BYTES),
            allowed: Allowed::Range {
                min: *MAX_BYTES_RANGE.start(),
                max: *MAX_BYTES_RANGE.end(),
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"Most payload bytes in one batch; a single larger record is still offered alone."#,
        },
        Key {
            name: "sink.linger_ms",
            default: DefaultValue::Int(DEFAULT_LINGER_MS),
            allowed: Allowed::Range {
                min: *LINGER_MS_RANGE.start(),
                max: *LINGER_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long the drain waits for more records before sending a batch that is not full."#,
        },
        Key {
            name: "sink.retry_initial_ms",
            default: DefaultValue::Int(DEFAULT_RETRY_INITIAL_MS),
            allowed: Allowed::Range {
                min: *RETRY_INITIAL_MS_RANGE.start(),
                max: *RETRY_INITIAL_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"First backoff after a transient failure; doubles (with jitter) on each further failure."#,
        },
        Key {
            name: "sink.retry_max_ms",
            default: DefaultValue::Int(DEFAULT_RETRY_MAX_MS),
            allowed: Allowed::Range {
                min: *RETRY_MAX_MS_RANGE.start(),
                max: *RETRY_MAX_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "≥ `retry_initial_ms`",
            meaning: r#"Longest backoff between two attempts; also the longest `Retry-After` honoured."#,
        },
        Key {
            name: "sink.max_retry_duration_ms",
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "retry forever",
                min: *MAX_RETRY_DURATION_MS_RANGE.start(),
                max: *MAX_RETRY_DURATION_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"After a batch has failed transiently for this long it is dead-lettered."#,
        },
        Key {
            name: "sink.build_timeout_ms",
            default: DefaultValue::Int(DEFAULT_BUILD_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *BUILD_TIMEOUT_MS_RANGE.start(),
                max: *BUILD_TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Deadline for building a new sink and running its health check (at start, at a reload, in `spillway check`); it runs on a thread of its own, so ingest, `ctl` and `/ready` never wait for it; past the deadline a reload is refused and the running sink keeps delivering."#,
        },
        Key {
            name: "sink.start",
            default: DefaultValue::Str("end"),
            allowed: Allowed::Text(r#"`"end"`, `"oldest"`"#),
            also: "",
            meaning: r#"Where a sink added by a reload (while the daemon runs) starts reading: `"end"` delivers only records that arrive from then on, `"oldest"` starts at the oldest record the buffer still holds for some sink. A sink that is in the config when the daemon starts and has no cursor yet (a new data folder, a sink added while it was stopped, a cursor file lost) always starts at the oldest: nothing is skipped at a start."#,
        },
        Key {
            name: "sink.lag_bytes_max",
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "no limit",
                min: *LAG_BYTES_MAX_RANGE.start(),
                max: *LAG_BYTES_MAX_RANGE.end(),
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"How far, in bytes of buffered records, the sink may fall behind the newest record before `on_lag` applies."#,
        },
        Key {
            name: "sink.on_lag",
            default: DefaultValue::Str("block"),
            allowed: Allowed::Text(r#"`"block"`, `"skip"`"#),
            also: "",
            meaning: r#"At `lag_bytes_max`: `"block"` keeps every record for this sink (the buffer grows until it catches up, and, full, slows the producers); `"skip"` skips the sink ahead to half the limit, counting and logging the records it never receives (see [Lagging sinks](#a-lagging-sink-block-or-skip)). `"skip"` needs `lag_bytes_max`."#,
        },
        Key {
            name: "sink.batches_in_flight",
            default: DefaultValue::Int(1),
            allowed: Allowed::Range {
                min: *BATCHES_IN_FLIGHT_RANGE.start() as u64,
                max: *BATCHES_IN_FLIGHT_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: r#"or `"adaptive"`"#,
            meaning: r#"Batches the sink may have in flight at once, per shard; `"adaptive"` learns how many the sink takes without pushing back or slowing down, up to `batches_in_flight_max` (see [Batches in flight](#batches-in-flight)). **Above 1 (and with `"adaptive"`) order across batches is not kept**; records within a batch keep theirs."#,
        },
        Key {
            name: "sink.batches_in_flight_max",
            default: DefaultValue::Int(DEFAULT_BATCHES_IN_FLIGHT_MAX as u64),
            allowed: Allowed::Range {
                min: *BATCHES_IN_FLIGHT_MAX_RANGE.start() as u64,
                max: *BATCHES_IN_FLIGHT_MAX_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"With `batches_in_flight = "adaptive"` only (an error otherwise): the most batches in flight per shard."#,
        },
        Key {
            name: "sink.checkpoint_interval_ms",
            default: DefaultValue::Int(DEFAULT_CHECKPOINT_INTERVAL_MS),
            allowed: Allowed::Range {
                min: *CHECKPOINT_INTERVAL_MS_RANGE.start(),
                max: *CHECKPOINT_INTERVAL_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long the durable copy of the sink's cursor may lag behind its confirmed batches. The cursor file is written after every confirmed batch, before the next is offered, so a crash of the daemon (SIGKILL, a panic, the OOM killer) makes the sink see again at most the batches it had in flight: the kernel still holds the write. It is fdatasynced once this long has passed since the last fdatasync (whether batches keep coming or the sink has caught up) and at a clean stop, so a power cut or a crash of the OS may also offer again what was confirmed in the last interval. `0`: fdatasynced after every confirmed batch, which makes every other fdatasync on the disk (the pushes' own) wait behind it (see [Duplicates after a crash](#several-sinks))."#,
        },
    ];

    /// The delivery keys' names, as the user writes them, from
    /// [`DeliveryConfig::REFERENCE`].
    pub(crate) fn keys() -> impl Iterator<Item = &'static str> {
        DeliveryConfig::REFERENCE.iter().map(Key::short)
    }

    /// Reads the value of `key`, one of [`DeliveryConfig::REFERENCE`].
    pub(crate) fn read_key<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "max_records" => self.max_records = map.next_value()?,
            "max_bytes" => self.max_bytes = map.next_value()?,
            "linger_ms" => self.linger_ms = map.next_value()?,
            "retry_initial_ms" => self.retry_initial_ms = map.next_value()?,
            "retry_max_ms" => self.retry_max_ms = map.next_value()?,
            "max_retry_duration_ms" => self.max_retry_duration_ms = map.next_value()?,
            "build_timeout_ms" => self.build_timeout_ms = map.next_value()?,
            "start" => self.start = map.next_value()?,
            "lag_bytes_max" => self.lag_bytes_max = map.next_value()?,
            "on_lag" => self.on_lag = map.next_value()?,
            "batches_in_flight" => self.batches_in_flight = map.next_value()?,
            "batches_in_flight_max" => self.batches_in_flight_max = map.next_value()?,
            "checkpoint_interval_ms" => self.checkpoint_interval_ms = map.next_value()?,
            other => unreachable!("{other} is not a delivery key"),
        }
        Ok(())
    }

    pub(crate) fn check(&self) -> Result<(), KeyProblem> {
        check_range(
            "checkpoint_interval_ms",
            self.checkpoint_interval_ms,
            &CHECKPOINT_INTERVAL_MS_RANGE,
            "",
        )?;
        self.check_batching_and_retries()?;
        self.check_lag()?;
        self.check_batches_in_flight()
    }

    fn check_batching_and_retries(&self) -> Result<(), KeyProblem> {
        check_range("max_records", self.max_records, &MAX_RECORDS_RANGE, "")?;
        check_range(
            "max_bytes",
            self.max_bytes,
            &MAX_BYTES_RANGE,
            " (1 KiB..=64 MiB)",
        )?;
        check_range("linger_ms", self.linger_ms, &LINGER_MS_RANGE, "")?;
        check_range(
            "retry_initial_ms",
            self.retry_initial_ms,
            &RETRY_INITIAL_MS_RANGE,
            "",
        )?;
        check_range("retry_max_ms", self.retry_max_ms, &RETRY_MAX_MS_RANGE, "")?;
        check_range(
            "build_timeout_ms",
            self.build_timeout_ms,
            &BUILD_TIMEOUT_MS_RANGE,
            "",
        )?;
        if self.retry_max_ms < self.retry_initial_ms {
            return Err(KeyProblem::AgainstKey {
                key: "retry_max_ms".into(),
                head: format!(": {} is less than ", self.retry_max_ms),
                other: "retry_initial_ms",
                tail: format!(" = {}; it must be at least that", self.retry_initial_ms),
            });
        }
        check_zero_or_range(
            "max_retry_duration_ms",
            self.max_retry_duration_ms,
            &MAX_RETRY_DURATION_MS_RANGE,
            "0 (retry forever)",
            "",
        )
    }

    fn check_lag(&self) -> Result<(), KeyProblem> {
        check_zero_or_range(
            "lag_bytes_max",
            self.lag_bytes_max,
            &LAG_BYTES_MAX_RANGE,
            "0 (no limit)",
            " (1 MiB..=1 TiB)",
        )?;
        if self.on_lag == OnLag::Skip && self.lag_bytes_max == 0 {
            return Err(KeyProblem::AgainstKey {
                key: "on_lag".into(),
                head: " = \"skip\" needs ".into(),
                other: "lag_bytes_max",
                tail: " (the lag to skip at); it is 0, no limit".into(),
            });
        }
        Ok(())
    }

    fn check_batches_in_flight(&self) -> Result<(), KeyProblem> {
        if let Concurrency::Fixed(n) = self.batches_in_flight {
            if !BATCHES_IN_FLIGHT_RANGE.contains(&n) {
                return Err(KeyProblem::OutOfRange {
                    key: "batches_in_flight",
                    value: n.into(),
                    allowed: format!(
                        "{}..={} or \"adaptive\"",
                        BATCHES_IN_FLIGHT_RANGE.start(),
                        BATCHES_IN_FLIGHT_RANGE.end()
                    ),
                });
            }
        }
        let Some(max) = self.batches_in_flight_max else {
            return Ok(());
        };
        if let Concurrency::Fixed(n) = self.batches_in_flight {
            return Err(KeyProblem::AgainstKey {
                key: "batches_in_flight_max".into(),
                head: " is not used with ".into(),
                other: "batches_in_flight",
                tail: format!(" = {n} (only with \"adaptive\")"),
            });
        }
        check_range(
            "batches_in_flight_max",
            max,
            &BATCHES_IN_FLIGHT_MAX_RANGE,
            "",
        )
    }

    /// The batch limits these keys ask for, as a sink reports them.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_records: self.max_records as usize,
            max_bytes: self.max_bytes as usize,
        }
    }

    /// `max_retry_duration_ms` as the drain uses it: `None` = retry forever.
    pub fn max_retry_duration(&self) -> Option<Duration> {
        (self.max_retry_duration_ms != 0).then(|| Duration::from_millis(self.max_retry_duration_ms))
    }

    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }

    pub fn retry_initial(&self) -> Duration {
        Duration::from_millis(self.retry_initial_ms)
    }

    pub fn retry_max(&self) -> Duration {
        Duration::from_millis(self.retry_max_ms)
    }

    /// Longest the cursor file may lag its confirmed batches (zero: after
    /// every batch).
    pub fn checkpoint_interval(&self) -> Duration {
        Duration::from_millis(self.checkpoint_interval_ms)
    }

    pub fn build_timeout(&self) -> Duration {
        Duration::from_millis(self.build_timeout_ms)
    }

    /// Where a sink without a cursor starts reading.
    pub fn start(&self) -> StartAt {
        self.start
    }

    /// `lag_bytes_max` as the drain uses it: `None` = no limit.
    pub fn lag_bytes_max(&self) -> Option<u64> {
        (self.lag_bytes_max != 0).then_some(self.lag_bytes_max)
    }

    /// What to do at `lag_bytes_max`.
    pub fn on_lag(&self) -> OnLag {
        self.on_lag
    }

    /// Batches in flight at once: a fixed count, or adaptive.
    pub fn batches_in_flight(&self) -> Concurrency {
        self.batches_in_flight
    }

    /// The most batches in flight with `batches_in_flight = "adaptive"`
    /// (the default when unset).
    pub fn batches_in_flight_max(&self) -> u32 {
        self.batches_in_flight_max
            .unwrap_or(DEFAULT_BATCHES_IN_FLIGHT_MAX)
    }
}

/// `value` must lie in `range`; `human` follows the range in the error
/// (e.g. `" (1 KiB..=64 MiB)"`).
pub(crate) fn check_range<T: Copy + Into<u64>>(
    key: &'static str,
    value: T,
    range: &RangeInclusive<T>,
    human: &str,
) -> Result<(), KeyProblem> {
    let (value, start, end) = (value.into(), (*range.start()).into(), (*range.end()).into());
    if (start..=end).contains(&value) {
        return Ok(());
    }
    Err(KeyProblem::OutOfRange {
        key,
        value,
        allowed: format!("{start}..={end}{human}"),
    })
}

/// `value` must be 0 (which means `zero`, e.g. `"0 (no limit)"`) or lie in
/// `range`; `human` follows the range in the error.
fn check_zero_or_range(
    key: &'static str,
    value: u64,
    range: &RangeInclusive<u64>,
    zero: &str,
    human: &str,
) -> Result<(), KeyProblem> {
    if value == 0 || range.contains(&value) {
        return Ok(());
    }
    Err(KeyProblem::OutOfRange {
        key,
        value,
        allowed: format!("{zero} or {}..={}{human}", range.start(), range.end()),
    })
}

/// `path`, required for `kind` and naming a file (`what` says which kind of
/// file, for the error). The file and plugin types share this key.
pub(crate) fn required_path<'a>(
    path: &'a Option<PathBuf>,
    kind: &'static str,
    what: &str,
) -> Result<&'a PathBuf, KeyProblem> {
    let Some(path) = path else {
        return Err(KeyProblem::Missing { key: "path", kind });
    };
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(KeyProblem::Invalid {
            key: "path".into(),
            reason: format!("{path:?} does not name {what}"),
        });
    }
    Ok(path)
}

/// A key naming an environment variable: a name the environment can hold
/// (not empty, no `=`, no NUL).
pub(crate) fn check_env_var_name(key: &str, name: &str) -> Result<(), KeyProblem> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(KeyProblem::Invalid {
            key: key.into(),
            reason: format!("{name:?} is not an environment variable name"),
        });
    }
    Ok(())
}
