//! How the daemon drives a sink, in one vocabulary for the crate that
//! builds sinks and the one that runs them: the [`SinkFactory`] that makes
//! a sink's instances, and the delivery keys every sink table has
//! ([`DeliveryConfig`]: batching, retries, the build deadline, where a sink
//! without a cursor starts, how far it may lag and what then, batches in
//! flight, the cursor's checkpoints), with their defaults, ranges and
//! meanings ([`DeliveryConfig::REFERENCE`]). Reading and checking the keys
//! is the sinks crate's; the drain acts on them as they are here.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

use crate::keys::{Allowed, DefaultValue, Key, Unit};
use crate::units::{GIB, KIB, MIB};
use crate::{Limits, Sink};

/// Why a sink instance could not be made (the message names the key or
/// the plugin).
pub type CreateError = Box<dyn std::error::Error + Send + Sync>;

/// Makes a sink's instances: one per shard, at start, again after an
/// instance panicked or could not be created, and after a reload. Shared by
/// every drain of the sink.
pub trait SinkFactory: Send + Sync {
    /// A new instance for `shard`. Called once per shard at start, and again
    /// after an instance panicked (the old one is gone by then).
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError>;

    /// One line for logs, e.g. `http POST https://host/path (batched, ndjson, timeout 10000 ms)`.
    fn describe(&self) -> String;
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAt {
    /// At the end of what the buffer holds: only records that arrive from
    /// now on.
    #[default]
    End,
    /// At the oldest record the buffer still holds for some sink (the
    /// shard's floor).
    Oldest,
}

impl StartAt {
    /// The values `start` takes, as written.
    pub const NAMES: &'static [&'static str] = &["end", "oldest"];
}

impl FromStr for StartAt {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        named(s, Self::NAMES, [StartAt::End, StartAt::Oldest])
    }
}

/// The value of `values` whose name (at the same place in `names`) is `s`.
fn named<T: Copy, const N: usize>(s: &str, names: &[&str], values: [T; N]) -> Result<T, ()> {
    names
        .iter()
        .position(|n| *n == s)
        .and_then(|i| values.get(i).copied())
        .ok_or(())
}

/// What a sink does when it falls `lag_bytes_max` behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLag {
    /// Keep every record: the buffer holds them (and grows) until the sink
    /// catches up.
    #[default]
    Block,
    /// Skip ahead: the records past the limit are dropped for this sink,
    /// counted and logged, so the buffer is not held by it.
    Skip,
}

impl OnLag {
    /// The values `on_lag` takes, as written.
    pub const NAMES: &'static [&'static str] = &["block", "skip"];
}

impl FromStr for OnLag {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        named(s, Self::NAMES, [OnLag::Block, OnLag::Skip])
    }
}

/// How many batches a sink may have in flight per shard
/// (`batches_in_flight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// Exactly this many (1 keeps batches in order).
    Fixed(u32),
    /// As many as the sink takes without pushing back or slowing down,
    /// learned by AIMD, up to `max`.
    Adaptive { max: u32 },
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::Fixed(1)
    }
}

impl InFlight {
    /// The most batches this setting ever has out.
    pub fn ceiling(self) -> u32 {
        match self {
            InFlight::Fixed(n) => n.max(1),
            InFlight::Adaptive { max } => max.max(1),
        }
    }
}

/// As written in a config: the integer, or `"adaptive"`.
impl fmt::Display for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InFlight::Fixed(n) => write!(f, "{n}"),
            InFlight::Adaptive { .. } => f.write_str("\"adaptive\""),
        }
    }
}

/// The delivery keys: how the drain batches, retries, starts, bounds its
/// lag and overlaps batches. Every sink table has them, whatever its type;
/// the sinks crate reads and checks them, the drain runs on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// Most records in one batch. Default 1000, range 1..=100000.
    pub batch_records_max: u32,
    /// Most payload bytes in one batch (a single larger record is still sent
    /// alone). Default 4194304 (4 MiB), range 1 KiB..=64 MiB.
    pub batch_bytes_max: u64,
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
    pub retry_duration_max_ms: u64,
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
    /// `batches_in_flight_max`; read it through [`DeliveryConfig::in_flight`],
    /// which fills that in). Default 1. Above 1 (and with `"adaptive"`)
    /// batches may be delivered out of order; records within a batch keep
    /// theirs.
    pub batches_in_flight: InFlight,
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
            batch_records_max: DEFAULT_MAX_RECORDS,
            batch_bytes_max: DEFAULT_MAX_BYTES,
            linger_ms: DEFAULT_LINGER_MS,
            retry_initial_ms: DEFAULT_RETRY_INITIAL_MS,
            retry_max_ms: DEFAULT_RETRY_MAX_MS,
            retry_duration_max_ms: 0,
            build_timeout_ms: DEFAULT_BUILD_TIMEOUT_MS,
            start: StartAt::default(),
            lag_bytes_max: 0,
            on_lag: OnLag::default(),
            batches_in_flight: InFlight::default(),
            batches_in_flight_max: None,
            checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
        }
    }
}

impl DeliveryConfig {
    /// Every key described for the reference (docs, `spillway.toml(5)`),
    /// from the same defaults and ranges the check uses.
    pub const REFERENCE: &'static [Key] = &[
        Key {
            name: "sink.batch_records_max",
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
            name: "sink.batch_bytes_max",
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
            name: "sink.retry_duration_max_ms",
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
            allowed: Allowed::OneOf(StartAt::NAMES),
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
            allowed: Allowed::OneOf(OnLag::NAMES),
            also: "",
            meaning: r#"At `lag_bytes_max`: `"block"` keeps every record for this sink (the buffer grows until it catches up, and, full, slows the producers); `"skip"` skips the sink ahead to half the limit, counting and logging the records it never receives (see [Lagging sinks](#a-lagging-sink-block-or-skip)). `"skip"` needs `lag_bytes_max`."#,
        },
        Key {
            name: "sink.batches_in_flight",
            default: DefaultValue::Int(1),
            allowed: Allowed::RangeOr {
                min: *BATCHES_IN_FLIGHT_RANGE.start() as u64,
                max: *BATCHES_IN_FLIGHT_RANGE.end() as u64,
                unit: Unit::Count,
                or: &["adaptive"],
            },
            also: "",
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
    pub fn keys() -> impl Iterator<Item = &'static str> {
        DeliveryConfig::REFERENCE.iter().map(Key::short)
    }

    /// The batch limits these keys ask for, as a sink reports them.
    pub fn limits(&self) -> Limits {
        Limits {
            max_records: self.batch_records_max as usize,
            max_bytes: self.batch_bytes_max as usize,
        }
    }

    /// `retry_duration_max_ms` as the drain uses it: `None` = retry forever.
    pub fn retry_duration_max(&self) -> Option<Duration> {
        (self.retry_duration_max_ms != 0).then(|| Duration::from_millis(self.retry_duration_max_ms))
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

    /// `on_lag = "skip"` with its `lag_bytes_max`: past it the cursor skips
    /// ahead. `None`: a lagging sink holds the buffer (`"block"`).
    pub fn skip_lag_bytes(&self) -> Option<u64> {
        match self.on_lag {
            OnLag::Skip => self.lag_bytes_max(),
            OnLag::Block => None,
        }
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

    /// Batches in flight at once: a fixed count, or adaptive up to
    /// `batches_in_flight_max` (its default when unset).
    pub fn in_flight(&self) -> InFlight {
        match self.batches_in_flight {
            InFlight::Fixed(n) => InFlight::Fixed(n),
            InFlight::Adaptive { .. } => InFlight::Adaptive {
                max: self
                    .batches_in_flight_max
                    .unwrap_or(DEFAULT_BATCHES_IN_FLIGHT_MAX),
            },
        }
    }
}

/// A factory made of a closure and a description, for tests, simulations
/// and small embeddings: the sinks crate's types implement
/// [`SinkFactory`] themselves.
pub fn factory_fn<F>(description: impl Into<String>, make: F) -> std::sync::Arc<dyn SinkFactory>
where
    F: Fn(u32) -> Result<Box<dyn Sink>, CreateError> + Send + Sync + 'static,
{
    struct FnFactory<F> {
        make: F,
        description: String,
    }

    impl<F> SinkFactory for FnFactory<F>
    where
        F: Fn(u32) -> Result<Box<dyn Sink>, CreateError> + Send + Sync,
    {
        fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError> {
            (self.make)(shard)
        }

        fn describe(&self) -> String {
            self.description.clone()
        }
    }

    std::sync::Arc::new(FnFactory {
        make,
        description: description.into(),
    })
}
