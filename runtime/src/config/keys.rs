//! Every key of the daemon's own tables (`[server]`, `[server.tcp]`,
//! `[server.http]`, `[wab]`, `[admin]`, `[log]`), declared once. The
//! tables `[server]`, `[wab]`, `[admin]` and `[log]` are
//! [`sink_sdk::key_table!`]s: each key's field, type, default, range with
//! its unit and meaning in one place, from which the struct, its default,
//! its range check and the reference (docs/configuration.md's tables,
//! `spillway.toml(5)`, the JSON Schema: `crate::reference`) are made. The
//! doors' keys are described here too (`door_keys!` for what every door
//! has, once for both) and read in `door`; a test fails when a door has a
//! key this file does not describe, or when the checked-in reference is not
//! what this file renders. The sink tables are described by the sinks
//! crate (`spillway_sinks::reference`).

use std::path::PathBuf;

use serde::Deserialize;
use sink_sdk::key_table;
use sink_sdk::keys::{Allowed, DefaultValue, Key, Table, Unit};
use sink_sdk::units::{GIB, KIB, MIB};

use super::{HttpIngestConfig, SocketGroup, SocketMode, TcpDoorConfig};
use crate::logging::LogFormat;

key_table! {
    /// `[server]`: the socket, connections and shards.
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    pub struct ServerConfig in "server" {
        socket_path: PathBuf = Key {
            default: DefaultValue::Path("spillway-data/spillway.sock"),
            allowed: Allowed::Text(r#"a path of at most 107 bytes"#),
            also: "",
            meaning: r#"Unix socket producers connect to. Mode `socket_mode` (0600 unless set); its folder is created 0700 if missing. A stale socket from a dead daemon is replaced; a live one is never replaced ("already listening"), and `<socket_path>.lock` (an exclusive lock held while the daemon runs) keeps two daemons started at once from replacing each other's socket. The daemon refuses to start when another user could replace the socket: see [security.md](security.md)."#,
        },
        socket_mode: SocketMode = Key {
            default: DefaultValue::Str("0600"),
            allowed: Allowed::Text(
                r#"a string of 3 or 4 octal digits, at most `"0777"`, owner read and write kept"#,
            ),
            also: "",
            meaning: r#"Permission bits of the producer socket, applied right after bind and before the first connection. `"0660"` lets the socket's group connect (a producer must also be able to search every folder on the way). A TOML integer is refused (`660` unquoted is decimal). The admin socket always stays 0600. The trade-off is in [operations.md](operations.md#socket-access)."#,
        },
        socket_group: Option<SocketGroup> = Key {
            default: DefaultValue::Unset("the daemon's group"),
            allowed: Allowed::Shaped {
                text: r#"a group name (`"spillway"`) or a numeric gid (`10001`)"#,
                schema: r#"{"type": ["string", "integer"], "minimum": 0}"#,
        },
        also: "",
        meaning: r#"The group the producer socket is given (before its mode is applied). Looked up when the daemon starts: an unknown group stops the start with an error naming this key. The daemon's user must be a member of it, or root."#,
        },
        allowed_uids: Option<Vec<u32>> = Key {
            default: DefaultValue::Unset("anyone the socket's mode lets in"),
            allowed: Allowed::Shaped {
                text: r#"a list of numeric uids, `[1001, 1002]` (not empty)"#,
                schema: r#"{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 4294967295}, "minItems": 1}"#,
        },
        also: "",
        meaning: r#"Only processes running as one of these uids may push over the Unix socket. Checked at accept from the peer's credentials (SO_PEERCRED: the uid, gid and pid the kernel recorded when it connected), before a byte is read: any other peer's connection is closed at once, counted (`connections_refused{reason="peer_uid"}`) and logged with its uid, gid and pid (at most one line a second). With `allowed_gids` too, a peer matching either list is let in. Root is not let in unless listed. A change needs a restart. Find a user's uid with `id -u NAME`. It covers the Unix socket only: with it (or `allowed_gids`) set, `[server.tcp]` and `[server.http]` must use TLS (with `ca_file` to say who may push); `tls = false` beside it is an error naming both keys."#,
        },
        allowed_gids: Option<Vec<u32>> = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Shaped {
                text: r#"a list of numeric gids, `[10001]` (not empty)"#,
                schema: r#"{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 4294967295}, "minItems": 1}"#,
        },
        also: "",
        meaning: r#"As `allowed_uids`, by the peer process's effective gid (its primary group, or what it setgid to; supplementary groups are not seen). Find a group's gid with `getent group NAME`."#,
        },
        allow_insecure_socket_dir: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Start even when the socket's folder is writable by another user (or a folder above it is writable by others without the sticky bit). A warning is logged at every start. See [security.md](security.md)."#,
        },
        data_dir: PathBuf = Key {
            default: DefaultValue::Path("spillway-data/wab"),
            allowed: Allowed::Text(r#"a path: a folder that is empty, missing or spillway's own"#),
            also: "",
            meaning: r#"The write-ahead buffer: `shard-NNN/` folders (segments, the shard's `checkpoint`, one `cursor-NAME` per sink), `sinks/NAME/dead-letter/` (each sink's dead letters). It must be empty, missing, or hold only what spillway makes there (`shard-NNN`, `sinks`, `dead-letter` (the single-sink release's layout), `LOCK`, and the sockets this config puts there with their `.lock` files; a file system's `lost+found` is allowed, so a dedicated mount can be it): a folder holding anything else (`/etc`, a home folder) is refused at start and by `spillway check`, naming a few of the entries. Folders 0700, files 0600. A data folder belongs to one daemon: `data_dir/LOCK` is locked (`flock`) before recovery and held for the life of the process; a second daemon on the same folder exits at once, naming the folder and the holder's pid. The lock goes away with the process, also on SIGKILL. `spillway inspect` and `spillway ctl` only read and take no lock."#,
        },
        shards: u32 = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::Range {
                min: 0,
                max: 256,
                unit: Unit::Count,
        },
        also: "0 = one per core",
        meaning: r#"Independent segment streams, each with its own flusher, sealer and drain thread. Connections are spread round-robin. More shards spread fsyncs; fewer shards put more records into each fsync. Lowering it never orphans records: every `shard-NNN` folder already in `data_dir` is served (a warning says so)."#,
        },
        connections_max: u32 = Key {
            default: DefaultValue::Int(1024),
            allowed: Allowed::Range {
                min: 1,
                max: 65536,
                unit: Unit::Count,
        },
        also: "",
        meaning: r#"Open connections past this are closed at once (unless an idle one can be evicted, see `evict_idle_connections`); the others are unaffected. At start the daemon raises its soft file descriptor limit to the hard limit and refuses a value that leaves fewer than 64 + (8 + 2 per sink) per shard + `admin.connections_max` per admin listener descriptors for segments, checkpoints, sinks and the admin listeners, naming the numbers (fix: lower this, or raise `ulimit -n` / `LimitNOFILE=`); see [file descriptors](#file-descriptors). When `accept()` still fails (EMFILE), the accept loop pauses (5 ms doubling to 1 s) and logs at most one line per second with a count."#,
        },
        payload_bytes_max: u64 = Key {
            default: DefaultValue::Int(16 * MIB),
            allowed: Allowed::Range {
                min: 1,
                max: 16 * MIB,
                unit: Unit::Bytes,
        },
        also: "",
        meaning: r#"Largest frame payload (a PushBatch counts whole). Checked from the header, before the payload is read: `PayloadTooLarge`."#,
        },
        connection_read_timeout_ms: u64 = Key {
            default: DefaultValue::Int(10_000),
            allowed: Allowed::Range {
                min: 100,
                max: 600_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"A frame that has started arriving must be complete within this; otherwise the connection is closed (slowloris)."#,
        },
        connection_idle_timeout_ms: u64 = Key {
            default: DefaultValue::Int(300_000),
            allowed: Allowed::Range {
                min: 1_000,
                max: 86_400_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"A connection with nothing in progress (no partial frame, no frame waiting for its ack) for this long is closed, so idle sockets cannot hold `connections_max` against other producers. So is one whose peer reads none of its acks for this long (`write_timeouts` in `ctl stats`): not sooner, since while it waits it costs only its unwritten acks, and closing it would invite it to reconnect and push another window of records. Clients reconnect on demand; keep it above your producers' longest quiet spell if reconnects cost you."#,
        },
        evict_idle_connections: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"At `connections_max`, a new connection closes the connection idle longest instead of being refused, so idle holders cannot lock producers out until `connection_idle_timeout_ms`. Only a connection with nothing in flight (no partial frame, no frame waiting for its answer, no answer unwritten) idle for at least `evict_idle_after_ms` is eligible; its producer sees the socket closed (EOF) and reconnects. Counted in `connections_evicted` (`spillway_connections_evicted_total`) and logged at most once a second. `false`: refuse the newcomer, as before."#,
        },
        evict_idle_after_ms: u64 = Key {
            default: DefaultValue::Int(1_000),
            allowed: Allowed::Range {
                min: 0,
                max: 3_600_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"How long a connection must have been idle before a new one may evict it, so a burst of fresh connections cannot evict each other (nor a producer between two pushes of a steady stream)."#,
        },
        read_buffer_bytes_max: u64 = Key {
            default: DefaultValue::Int(128 * MIB),
            allowed: Allowed::Range {
                min: MIB,
                max: 64 * GIB,
                unit: Unit::Bytes,
        },
        also: "≥ `payload_bytes_max`",
        meaning: r#"Memory all connections together may hold in frames larger than 64 KiB while they arrive. A connection that is receiving reads into a 64 KiB buffer (one quiet for a second gives it back, and one that never sent a byte has none: an idle connection holds about 2 KiB in all); a larger frame first reserves its size from this budget, and its memory becomes resident as its bytes arrive (a client that declares 16 MiB and sends 15 holds about 15). At the cap, connections whose frame needs more wait (holding at most 64 KiB, their stall clock paused) and are woken when a reserved frame completes or times out. 128 MiB lets eight 16 MiB frames arrive at once, plenty at memory-copy speed, and keeps a daemon under a flood of stalled huge frames within about 250 MiB (measured: see the `hostile` bench). Frames up to 2 MiB come from the heap and their buffers are kept for the next ones once written (up to 32 MiB of them, outside this budget); once no frame larger than 64 KiB has come for 2 s, the daemon drops them and hands the freed heap memory back to the system, so after a burst its RSS falls back within a few seconds."#,
        },
        inflight_records_max: u32 = Key {
            default: DefaultValue::Int(4096),
            allowed: Allowed::Range {
                min: 1,
                max: 65536,
                unit: Unit::Count,
        },
        also: "",
        meaning: r#"Records (and frames) one connection may have waiting for their commit. At the window the connection stops reading until acks free it."#,
        },
        inflight_bytes_max: u64 = Key {
            default: DefaultValue::Int(32 * MIB),
            allowed: Allowed::Range {
                min: 64 * KIB,
                max: GIB,
                unit: Unit::Bytes,
        },
        also: "",
        meaning: r#"Payload bytes one connection may have waiting. A single frame larger than this is still admitted when nothing else is in flight."#,
        },
        shutdown_timeout_ms: u64 = Key {
            default: DefaultValue::Int(5_000),
            allowed: Allowed::Range {
                min: 0,
                max: 600_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"On SIGTERM/SIGINT, how long the sink batch in flight may take to finish before it is abandoned (it is delivered again after the restart)."#,
        },
    }
    also {
        /// `[server.http]`: the HTTP ingest door; unset = off.
        http: Option<HttpIngestConfig>,
        /// `[server.tcp]`: the wire protocol over TCP (with TLS); unset = off.
        tcp: Option<TcpDoorConfig>,
    }
}

key_table! {
    /// `[wab]`: the write-ahead buffer on disk.
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    pub struct WabConfig in "wab" {
        segment_bytes_max: u64 = Key {
            default: DefaultValue::Int(64 * MIB),
            allowed: Allowed::Range {
                min: MIB,
                max: GIB,
                unit: Unit::Bytes,
        },
        also: "",
        meaning: r#"Size of one segment file. Segments are prepared by the sealer ahead of time (a new file zero-filled, or a delivered segment's file taken over), so the flusher's `fdatasync` never commits file-size metadata. 64 MiB keeps rotations rare (one seal per 64 MiB: footer, fsync, rename, directory fsync, all on the sealer's thread) while a delivered segment is freed soon enough; preallocating 64 MiB takes well under a second on any SSD and happens beside the flusher, not in front of it. 1 MiB segments cost no throughput cliff (see docs/benchmarks.md). The data disk needs room for two segments per shard to rotate without a pause; with room for one, pushes get `Overloaded` at each rotation until the full segment is delivered and deleted (docs/operations.md, Sizing)."#,
        },
        wab_bytes_max: u64 = Key {
            default: DefaultValue::Int(4 * GIB),
            allowed: Allowed::Range {
                min: 4 * MIB,
                max: 16 * 1024 * GIB,
                unit: Unit::Bytes,
        },
        also: "≥ `segment_bytes_max`",
        meaning: r#"Total bytes (record headers + payloads) the buffer may hold undelivered. At the cap pushes get the retryable `Overloaded` nack; the cap lifts as the drain deletes delivered segments. 4 GiB absorbs a long downstream outage at typical rates (at 5,000 records/s of 256 B, about 50 minutes) while staying far from filling a normal data disk; size it to (outage you want to ride out) × (ingest bytes/s)."#,
        },
        buffered_flush_interval_ms: u64 = Key {
            default: DefaultValue::Int(100),
            allowed: Allowed::Range {
                min: 1,
                max: 60_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"Longest a `Buffered` record (acked from the page cache) waits for its fsync."#,
        },
        flusher_spin_us: u64 = Key {
            default: DefaultValue::Int(200),
            allowed: Allowed::Range {
                min: 0,
                max: 10_000,
                unit: Unit::Us,
        },
        also: "0 never spins",
        meaning: r#"After each group commit the flusher spins (yielding the core to anything runnable) this long for the next batch before it sleeps. A lone producer's next push arrives within about one socket round trip, so it finds the flusher awake instead of paying the ~40-50 µs wake of an idle core. Costs at most this much CPU per group when traffic stops; 0 disables it."#,
        },
        fsync_failures_max: u32 = Key {
            default: DefaultValue::Int(3),
            allowed: Allowed::Range {
                min: 1,
                max: 100,
                unit: Unit::Count,
        },
        also: "",
        meaning: r#"Failed segment writes/fdatasyncs in a row after which a shard stops trying on every push and backs off. After each failure the group is nacked, the segment abandoned (never written or fsynced again) and the next push starts a fresh one; from this many failures in a row on, the shard is `Unwritable` and refuses pushes at once while it retries a fresh segment with backoff (50 ms doubling to 1 s). It turns `Running` again by itself once a write and fsync succeed; it never stops for good on its own."#,
        },
        group_bytes_max: u64 = Key {
            default: DefaultValue::Int(4 * MIB),
            allowed: Allowed::Range {
                min: 64 * KIB,
                max: GIB,
                unit: Unit::Bytes,
        },
        also: "",
        meaning: r#"Payload bytes one group commit takes besides its first batch (which is always taken, however large); a group also takes at most 16,384 records besides its first batch. Batches of other connections ride past one that does not fit (each connection's order is kept), and a batch larger than the bound at the front of the queue is passed over once when other connections' batches fit, so a small producer queued behind 16 MiB records waits for the one large write and fsync in progress, not for hundreds of MiB (measured with 32 connections pushing 16 MiB Sync records: the small producer's p50 went from ~300 ms before any bound, and ~40 ms with the bound alone, to 9-16 ms). 4 MiB is about 4 ms of writing on a SATA SSD and well past the point where larger groups stop paying (see docs/benchmarks.md)."#,
        },
    }
}

key_table! {
    /// `[admin]`: the socket `spillway ctl` talks to.
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    pub struct AdminConfig in "admin" {
        socket_path: PathBuf = Key {
            default: DefaultValue::Path("spillway-data/admin.sock"),
            allowed: Allowed::Text(r#"a path of at most 107 bytes, not `server.socket_path`"#),
            also: "",
            meaning: r#"Unix socket (0600) that `spillway ctl` talks to: `health`, `stats`, `metrics`, `dead-letter list/requeue/drop`, `reload`. Must differ from `server.socket_path`."#,
        },
        metrics_address: Option<String> = Key {
            default: DefaultValue::Unset("off"),
            allowed: Allowed::Text(r#"`ip:port`"#),
            also: "",
            meaning: r#"An `IP:port` (e.g. `"127.0.0.1:9187"`) serving Prometheus metrics at `GET /metrics`, liveness at `GET /health` and readiness at `GET /ready`; the address is logged at start. See [metrics](#metrics) and [health](#health-and-readiness)."#,
        },
        connections_max: u32 = Key {
            default: DefaultValue::Int(16),
            allowed: Allowed::Range {
                min: 1,
                max: 1024,
                unit: Unit::Count,
        },
        also: "",
        meaning: r#"Connections each admin listener (the admin socket, and the metrics address when set) serves at once; past it a new connection is closed at once and counted (`admin_connections_refused`). Their descriptors are set aside from the limit beside `server.connections_max` (see [descriptors](#file-descriptors)), so no client of these listeners can take the descriptors the WAB needs."#,
        },
        ready_stall_ms: u64 = Key {
            default: DefaultValue::Int(5_000),
            allowed: Allowed::Range {
                min: 100,
                max: 3_600_000,
                unit: Unit::Ms,
        },
        also: "",
        meaning: r#"A delivery (or a sink health check) outstanding longer than this makes `GET /ready` and `ctl health` say the sink is `stalled` (the daemon is degraded; not ready with `ready_requires_sinks`), before it fails. Keep it below the sink's own request timeout (the HTTP sink's `timeout_ms` is 10 s by default), and above a normal batch's time."#,
        },
        ready_requires_sinks: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"`false`: ready means the daemon takes writes (every shard accepts and makes durable a push at every tier); a sink that retries, failed or stalled makes it `degraded`, which `GET /ready` answers with 200 and `ctl health` with exit status 3, so a readiness probe or a load balancer keeps sending producers to the buffer during the downstream outage it is there for. `true`: a failing sink makes the daemon not ready (503, exit status 1), as before this key existed. See [health](#health-and-readiness)."#,
        },
    }
}

key_table! {
    /// `[log]`.
    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    pub struct LogConfig in "log" {
        level: String = Key {
            default: DefaultValue::Str("info"),
            allowed: Allowed::Text(
                r#"a tracing filter: levels, module paths, `module=level`, comma-separated"#,
            ),
            also: "",
            meaning: r#"A tracing filter (`info`, `warn`, `spillway_actors=debug,info`). Checked at start and by `spillway check`: every comma-separated part must be a level (`off`, `error`, `warn`, `info`, `debug`, `trace`), a module path, or `module=level` (tracing would read a typo such as `verbose!!` as a target name and silence every other line, errors included). `RUST_LOG` overrides it (an invalid `RUST_LOG` is reported and ignored). Logs go to stderr; a failed write there (a closed pipe, a full disk) is dropped and counted (`log_write_failures`), never fatal."#,
        },
        format: LogFormat = Key {
            default: DefaultValue::Str("text"),
            allowed: Allowed::OneOf(&["text", "json"]),
            also: "",
            meaning: r#"`"text"`: one readable line per event; `"json"`: one JSON object per line (`timestamp`, `level`, `fields.message` and the event's other fields, `target`), for a log collector. Anything else is an error naming `log.format` and the two values. Examples of both in [operations.md](operations.md#logs). Text carries ANSI colour only when stderr is a terminal and `NO_COLOR` is not set (to any value); a file, a pipe or the journal gets plain text."#,
        },
    }
}

/// The keys both network doors have (`[server.tcp]`, `[server.http]`),
/// described once.
macro_rules! door_keys {
    ($table:literal, $all:ident, $listen:ident, $tls:ident, $cert:ident, $key:ident, $ca:ident, $names:ident, $max:ident) => {
        /// Every key the door has as a door, in the reference's order.
        pub const $all: [Key; 7] = [$listen, $tls, $cert, $key, $ca, $names, $max];
        pub const $listen: Key = Key {
            name: concat!($table, ".listen"),
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"`ip:port`"#),
            also: "",
            meaning: r#"The address to serve on (`"[::]:PORT"` for every address). A name that is not an IP address is refused, naming the key."#,
        };
        pub const $tls: Key = Key {
            name: concat!($table, ".tls"),
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true`; `false` only on a loopback address"#),
            also: "",
            meaning: r#"TLS on the door. `false` is accepted only on a loopback address (records would otherwise cross the network in clear): the error names this key. `false` is also refused beside `server.allowed_uids` / `allowed_gids`, which cannot see who is behind a TCP connection."#,
        };
        pub const $cert: Key = Key {
            name: concat!($table, ".cert_file"),
            default: DefaultValue::Unset("required with `tls`"),
            allowed: Allowed::Text(r#"a path"#),
            also: "",
            meaning: r#"PEM certificate chain, the server's own first. Re-read at every reload. One that has expired, is not yet valid or is not for serverAuth is refused (the old pair stays at a reload)."#,
        };
        pub const $key: Key = Key {
            name: concat!($table, ".key_file"),
            default: DefaultValue::Unset("required with `tls`"),
            allowed: Allowed::Text(r#"a path"#),
            also: "",
            meaning: r#"PEM private key (PKCS#8, PKCS#1 or SEC1). Re-read at every reload; a new pair that does not load keeps the old one."#,
        };
        pub const $ca: Key = Key {
            name: concat!($table, ".ca_file"),
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path"#),
            also: "",
            meaning: r#"PEM CA certificate(s): every client must present a certificate chaining to one (mutual TLS)."#,
        };
        pub const $names: Key = Key {
            name: concat!($table, ".allowed_names"),
            default: DefaultValue::Unset(""),
            allowed: Allowed::Shaped {
                text: r#"a non-empty list"#,
                schema: r#"{"type": "array", "items": {"type": "string"}, "minItems": 1}"#,
            },
            also: "needs `ca_file`",
            meaning: r#"A client certificate must carry one of these DNS names or IP addresses among its subject alternative names."#,
        };
        pub const $max: Key = Key {
            name: concat!($table, ".connections_max"),
            default: DefaultValue::Int(1024),
            allowed: Allowed::Range {
                min: 1,
                max: 65536,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"This door's connections open at once; past it a new one is closed at once. Added to `server.connections_max` in the [descriptor](#file-descriptors) check."#,
        };
    };
}

door_keys!(
    "server.tcp",
    SERVER_TCP_DOOR,
    SERVER_TCP_LISTEN,
    SERVER_TCP_TLS,
    SERVER_TCP_CERT,
    SERVER_TCP_KEY,
    SERVER_TCP_CLIENT_CA,
    SERVER_TCP_ALLOWED_NAMES,
    SERVER_TCP_CONNECTIONS_MAX
);

door_keys!(
    "server.http",
    SERVER_HTTP_DOOR,
    SERVER_HTTP_LISTEN,
    SERVER_HTTP_TLS,
    SERVER_HTTP_CERT,
    SERVER_HTTP_KEY,
    SERVER_HTTP_CLIENT_CA,
    SERVER_HTTP_ALLOWED_NAMES,
    SERVER_HTTP_CONNECTIONS_MAX
);

key_table! {
    /// `[server.tcp]`'s own key, beside what every door has
    /// ([`super::DoorConfig`]).
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct TcpKeys in "server.tcp" {
        handshake_timeout_ms: u64 = Key {
            default: DefaultValue::Int(5_000),
            allowed: Allowed::Range {
                min: 100,
                max: 60_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"A TLS handshake must finish within this, or the connection is closed. Until it has, the connection holds no claim on its slot: at `connections_max` a new connection closes the one longest in its handshake instead of being refused (`tcp_connections_evicted`, `spillway_tcp_connections_evicted_total`), so clients that connect and never finish cannot keep producers out. A connection past its handshake is never evicted."#,
        },
    }
}

key_table! {
    /// `[server.http]`'s own keys, beside what every door has
    /// ([`super::DoorConfig`]).
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct HttpKeys in "server.http" {
        token_env: Option<String> = Key {
            default: DefaultValue::Unset("no token"),
            allowed: Allowed::Text(r#"an environment variable name"#),
            also: "",
            meaning: r#"The variable holding the bearer token every request must carry (`Authorization: Bearer ...`); unset or empty at start is an error naming this key."#,
        },
        body_bytes_max: u64 = Key {
            default: DefaultValue::Int(16 * MIB),
            allowed: Allowed::Range {
                min: KIB,
                max: GIB,
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"Largest request body: 413 past it (from the declared length, before the body is read). A `Content-Encoding: gzip` body may inflate to at most this many bytes."#,
        },
        request_timeout_ms: u64 = Key {
            default: DefaultValue::Int(10_000),
            allowed: Allowed::Range {
                min: 100,
                max: 600_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"A request's body must arrive within this once its head is in (a slow body gets 408). The head, an idle keep-alive connection and a TLS handshake have `idle_timeout_ms`."#,
        },
        idle_timeout_ms: u64 = Key {
            default: DefaultValue::Int(5_000),
            allowed: Allowed::Range {
                min: 100,
                max: 60_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"A connection not in a request (just accepted, or between two requests on keep-alive) must finish its TLS handshake and send a complete request head within this, or it is closed. While it waits it holds no claim on its slot: at `connections_max` a new connection closes the one waiting longest instead of being refused (`http_connections_evicted`, `spillway_http_connections_evicted_total`), so idle or silent connections cannot keep out a client with a request. A connection whose request is being answered is never evicted."#,
        },
    }
}

/// `a` and then `b` in one array (a door's table: what every door has,
/// then its own keys).
pub(super) const fn concat<T: Copy, const ALL: usize>(a: &[T], b: &[T]) -> [T; ALL] {
    assert!(ALL == a.len() + b.len());
    let mut all = [a[0]; ALL];
    let mut i = 0;
    while i < ALL {
        all[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    all
}

const SERVER_TCP_KEYS: [Key; 8] = concat(&SERVER_TCP_DOOR, TcpKeys::KEYS);
const SERVER_HTTP_KEYS: [Key; 11] = concat(&SERVER_HTTP_DOOR, HttpKeys::KEYS);

/// The daemon's tables, in the order the reference lists them.
pub const TABLES: &[Table] = &[
    Table {
        name: "server",
        keys: ServerConfig::KEYS,
    },
    Table {
        name: "server.tcp",
        keys: &SERVER_TCP_KEYS,
    },
    Table {
        name: "server.http",
        keys: &SERVER_HTTP_KEYS,
    },
    Table {
        name: "wab",
        keys: WabConfig::KEYS,
    },
    Table {
        name: "admin",
        keys: AdminConfig::KEYS,
    },
    Table {
        name: "log",
        keys: LogConfig::KEYS,
    },
];
