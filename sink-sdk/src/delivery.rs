//! How the daemon drives a sink, in one vocabulary for the crate that
//! builds sinks and the one that runs them: the [`SinkFactory`] that makes
//! a sink's instances, and the delivery keys every sink table has
//! ([`DeliveryConfig`]: batching, retries, the build deadline, where a sink
//! without a cursor starts, how far it may lag and what then, batches in
//! flight, the cursor's checkpoints), with their defaults, ranges and
//! meanings ([`DeliveryConfig::REFERENCE`]). Reading and checking the keys
//! is the sinks crate's; the drain acts on them as they are here.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::declare::{AsInt, KeyDefault};
use crate::keys::{Allowed, Key, Unit};
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

/// `batches_in_flight_max` when `batches_in_flight = "adaptive"` leaves it
/// unset.
pub const DEFAULT_BATCHES_IN_FLIGHT_MAX: u32 = 16;

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

crate::key_table! {
    /// The delivery keys: how the drain batches, retries, starts, bounds its
    /// lag and overlaps batches. Every sink table has them, whatever its
    /// type; the sinks crate reads them and checks the rules across them,
    /// the drain runs on them.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeliveryConfig in "sink" {
        batch_records_max: u32 = Key {
            default: DefaultValue::Int(1000),
            allowed: Allowed::Range {
                min: 1,
                max: 100_000,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"Most records in one batch."#,
        },
        batch_bytes_max: u64 = Key {
            default: DefaultValue::Int(4 * MIB),
            allowed: Allowed::Range {
                min: KIB,
                max: 64 * MIB,
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"Most payload bytes in one batch; a single larger record is still offered alone."#,
        },
        linger_ms: u64 = Key {
            default: DefaultValue::Int(5),
            allowed: Allowed::Range {
                min: 0,
                max: 10_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long the drain waits for more records before sending a batch that is not full."#,
        },
        retry_initial_ms: u64 = Key {
            default: DefaultValue::Int(100),
            allowed: Allowed::Range {
                min: 1,
                max: 60_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"First backoff after a transient failure; doubles (with jitter) on each further failure."#,
        },
        retry_max_ms: u64 = Key {
            default: DefaultValue::Int(30_000),
            allowed: Allowed::Range {
                min: 10,
                max: 3_600_000,
                unit: Unit::Ms,
            },
            also: "≥ `retry_initial_ms`",
            meaning: r#"Longest backoff between two attempts; also the longest `Retry-After` honoured."#,
        },
        retry_duration_max_ms: u64 = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "retry forever",
                min: 1_000,
                max: 604_800_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Records failing transiently this long are dead-lettered: those of a sink that takes nothing else (down), or a lone record while it takes others (poison; see [Poison records](#poison-records))."#,
        },
        // Long enough for a TLS handshake to a far endpoint or a database
        // login, short enough that a stuck one is refused while the
        // operator still waits on `ctl reload`.
        build_timeout_ms: u64 = Key {
            default: DefaultValue::Int(10_000),
            allowed: Allowed::Range {
                min: 100,
                max: 600_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Deadline for building a new sink (at start, at a reload, in `spillway check`), and again for its health check; each runs on a thread of its own, so ingest, `ctl` and `/ready` never wait for it. A build past the deadline is refused (a start fails, a reload leaves the running sink delivering); a health check past it is a warning, as a failed one is: a reload is applied and the sink retries until its endpoint answers."#,
        },
        start: StartAt = Key {
            default: DefaultValue::Str("end"),
            allowed: Allowed::OneOf(StartAt::NAMES),
            also: "",
            meaning: r#"Where a sink added by a reload (while the daemon runs) starts reading: `"end"` delivers only records that arrive from then on, `"oldest"` every record the shards still hold, those the other sinks already confirmed included (retention keeps each shard's active segment, and every segment some sink still needs; what every sink had confirmed in a segment already deleted is gone). A sink that is in the config when the daemon starts and has no cursor yet (a new data folder, a sink added while it was stopped, a cursor file lost) always starts where every sink has confirmed: nothing is skipped at a start. To replay more into a sink later: `ctl sink rewind NAME --to oldest`."#,
        },
        // Below 1 MiB a sink would skip at every hiccup; past 1 TiB the
        // limit is none.
        lag_bytes_max: u64 = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "no limit",
                min: MIB,
                max: 1024 * GIB,
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"How far, in bytes of buffered records, the sink may fall behind the newest record before `on_lag` applies."#,
        },
        on_lag: OnLag = Key {
            default: DefaultValue::Str("block"),
            allowed: Allowed::OneOf(OnLag::NAMES),
            also: "",
            meaning: r#"At `lag_bytes_max`: `"block"` keeps every record for this sink (the buffer grows until it catches up, and, full, slows the producers); `"skip"` skips the sink ahead to half the limit, counting and logging the records it never receives (see [Lagging sinks](#a-lagging-sink-block-or-skip)). `"skip"` needs `lag_bytes_max`."#,
        },
        // Read through `DeliveryConfig::in_flight`, which fills in the
        // adaptive maximum.
        batches_in_flight: InFlight = Key {
            default: DefaultValue::Int(1),
            allowed: Allowed::RangeOr {
                min: 1,
                max: 64,
                unit: Unit::Count,
                or: &["adaptive"],
            },
            also: "",
            meaning: r#"Batches the sink may have in flight at once, per shard; `"adaptive"` learns how many the sink takes without pushing back or slowing down, up to `batches_in_flight_max` (see [Batches in flight](#batches-in-flight)). **Above 1 (and with `"adaptive"`) order across batches is not kept**; records within a batch keep theirs."#,
        },
        batches_in_flight_max: Option<u32> = Key {
            default: DefaultValue::Int(DEFAULT_BATCHES_IN_FLIGHT_MAX as u64),
            allowed: Allowed::Range {
                min: 2,
                max: 256,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"With `batches_in_flight = "adaptive"` only (an error otherwise): the most batches in flight per shard."#,
        },
        // 100 ms: a power cut may offer again what was confirmed in the
        // last 100 ms (a crash of the process only the batches in flight).
        // Measured with `spillway bench --scenario batch_durable_n256` and
        // the noop sink: the cursor's fdatasync after every batch made the
        // flusher's own fdatasync wait behind it (see docs/benchmarks.md).
        checkpoint_interval_ms: u64 = Key {
            default: DefaultValue::Int(100),
            allowed: Allowed::Range {
                min: 0,
                max: 60_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long the durable copy of the sink's cursor may lag behind its confirmed batches. The cursor file is written after every confirmed batch, before the next is offered, so a crash of the daemon (SIGKILL, a panic, the OOM killer) makes the sink see again at most the batches it had in flight: the kernel still holds the write. It is fdatasynced once this long has passed since the last fdatasync (whether batches keep coming or the sink has caught up) and at a clean stop, so a power cut or a crash of the OS may also offer again what was confirmed in the last interval. `0`: fdatasynced after every confirmed batch, which makes every other fdatasync on the disk (the pushes' own) wait behind it (see [Duplicates after a crash](#several-sinks))."#,
        },
    }
}

impl KeyDefault for StartAt {
    fn key_default(key: &Key) -> Self {
        key.text().parse().expect("a start the key declares")
    }
}

impl KeyDefault for OnLag {
    fn key_default(key: &Key) -> Self {
        key.text().parse().expect("an on_lag the key declares")
    }
}

impl KeyDefault for InFlight {
    fn key_default(key: &Key) -> Self {
        InFlight::Fixed(u32::key_default(key))
    }
}

/// `batches_in_flight`'s range applies to a fixed count.
impl AsInt for InFlight {
    fn as_int(&self) -> Option<u64> {
        match self {
            InFlight::Fixed(n) => Some(u64::from(*n)),
            InFlight::Adaptive { .. } => None,
        }
    }
}

impl DeliveryConfig {
    /// Every key described for the reference (docs, `spillway.toml(5)`,
    /// the JSON Schema), from the same declaration the defaults and the
    /// ranges come from.
    pub const REFERENCE: &'static [Key] = DeliveryConfig::KEYS;

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
