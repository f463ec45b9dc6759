//! `spillway run`: start the actor system on a validated config, print
//! where things are, and wait for a signal.
//!
//! Start-up order: take the data folder's lock (a second daemon exits here,
//! naming the holder), raise and check the file descriptor limit, lock and
//! bind the sockets (refused in a folder another user could write; fails
//! fast if another daemon owns them), recover every shard (before any push
//! is accepted), start the flushers, the connection arbiters (one per
//! core), the listener, the supervisor, then the signal handlers; only
//! then is systemd told READY=1 (`notify.rs`, when `NOTIFY_SOCKET` is set).
//! SIGTERM / SIGINT stop gracefully.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use spillway_actors::{
    bind_socket, ensure_socket_folder, ConnectionContext, ConnectionLimits, CursorControl,
    DaemonStats, DeliveryBoard, DrainStats, HttpIngest, HttpIngestSettings, Listener, ReadBudget,
    Retention, RetentionStats, ShardQueue, SinkFigures, SinkSlot, SocketAccess, SocketLock,
    StopListening, TcpDoor, TlsServer, WabBudget,
};
use spillway_sinks::{SinkConfig, SinkEnv};
use spillway_wab::{shard_dir, DataDirLock, FsStorage};

use crate::admin::{Admin, AdminState, ListenerLoad};
use crate::config::{Config, DoorConfig, DEFAULT_SINK};
use crate::logging::say;
use crate::reload::Reloader;
use crate::sinks::{build_on_thread, build_sinks, build_timeout, BuiltSink};
use crate::sinks::{
    open_dead_letters, open_requeue, seen_in_stores, sinks_on_disk, start_drain, DeadLetterStores,
    RequeueStores, SinkRun,
};
use crate::supervisor::{Children, DrainSlot, ShardSlot, Shutdown, Supervisor};

/// Run the daemon until it is told to stop. Errors are start-up failures.
pub fn run(
    cfg: Config,
    origin: &str,
    config_path: Option<PathBuf>,
    watch_config: bool,
) -> Result<(), String> {
    // Before anything is created: an unknown socket group is a config error.
    let access = cfg.server.socket_access().map_err(|e| e.to_string())?;
    crate::admin::metrics::mark_start();
    // Held until the process exits: the data folder and the sockets have one owner.
    let _owner = take_ownership(&cfg)?;
    return_large_buffers_to_the_system();
    let sockets = [
        cfg.server.socket_path.clone(),
        cfg.admin.socket_path.clone(),
    ];
    let system = actix_rt::System::new();
    let result =
        system.block_on(async move { start(cfg, access, origin, config_path, watch_config) });
    if let Err(e) = result {
        // The socket names are ours (their locks are held): leave no
        // socket behind that nobody answers.
        for path in &sockets {
            let is_socket = std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            // Only a socket, never another file that happens to sit there;
            // with its lock held, a socket here is ours or a dead daemon's.
            if is_socket {
                let _ = std::fs::remove_file(path);
            }
        }
        // Actors started before the failure (earlier shards' flushers and
        // drains) must be stopped inside the runtime: dropping the system
        // with them still queued panicked ("there is no reactor running").
        System::current().stop();
        let _ = system.run();
        return Err(e);
    }
    system
        .run()
        .map_err(|e| format!("actor system failed: {e}"))
}

/// Allocations at or above this size get their own mapping, returned to
/// the system when freed. Above the drain's 256 KiB read-ahead buffers,
/// which are allocated per read: at 256 KiB each became an mmap, page
/// faults and munmap, and a serial Sync push's p50 rose by ~30 µs
/// (measured with `spillway bench --scenario single_thread_sync` against
/// the build before, alternating runs: 164-176 µs vs 126-135 µs; at 1 MiB
/// the two are equal, 148 vs 152 µs). Above a PushBatch frame of 1 MiB
/// of payload (the bench's payload sweep and the size producers batch
/// to): at 1 MiB each such frame was an mmap, a page fault per 4 KiB as
/// its bytes arrived and a munmap, and 4 KiB to 64 KiB records moved
/// 15-30% fewer MiB/s pipelined (`spillway bench --scenario
/// payload_sweep`, alternating runs against the 1 MiB build). Frames
/// larger than this (up to the 16 MiB payload cap, what the `hostile`
/// scenario stalls) still get their own mapping.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: libc::c_int = 2 * 1024 * 1024;

/// Pin glibc's mmap threshold. By default it rises to the size of the
/// largest mapping freed (up to 32 MiB), after which 16 MiB frame buffers
/// come from the heap and stay resident after use: measured under the
/// bench's `hostile` scenario (stalled 16 MiB frames closed and reopened),
/// the daemon held far more than `read_buffer_bytes_max` that way.
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before any
    // other thread of ours exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}

/// How often the daemon looks whether to hand freed heap memory back to
/// the system (see [`spawn_memory_trim`]).
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Hand freed heap memory back to the system once large frames stop
/// coming. Frame buffers under [`MMAP_THRESHOLD_BYTES`] come from the heap
/// and are reused while frames keep coming, but once a burst is over glibc
/// keeps what they held resident: 100 connections each sending three
/// PushBatches of 1.9 MiB left the daemon at 102 MiB RSS, against 21 MiB
/// when every such frame was a mapping of its own. So when a whole
/// [`TRIM_EVERY`] passed with no frame larger than 64 KiB (none released
/// its read-buffer budget, whichever door it came through) and one did
/// before, the frame buffers kept for reuse are dropped
/// ([`spillway_actors::ingest::frame_buffers`]) and `malloc_trim` gives back the
/// free pages of every arena: once after each burst, never under a steady
/// load of large frames (their buffers are in use again at once) and never
/// on an idle daemon.
fn spawn_memory_trim(read_budget: Arc<ReadBudget>) {
    actix_rt::spawn(async move {
        let mut tick = actix_rt::time::interval(TRIM_EVERY);
        let mut seen = read_budget.epoch();
        let mut since_trim = false;
        loop {
            tick.tick().await;
            let now = read_budget.epoch();
            if now != seen {
                (seen, since_trim) = (now, true);
            } else if since_trim {
                since_trim = false;
                read_budget.frame_buffers.clear();
                trim_heap();
            }
        }
    });
}

/// Give the free pages of every heap arena back to the system.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the system (glibc
    // locks each arena while it walks it).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The locks a running daemon holds for its whole life.
struct Ownership {
    _data: DataDirLock,
    _socket: SocketLock,
    _admin: SocketLock,
}

/// Take the data folder (before recovery reads anything) and the socket
/// names; check the descriptor limit and the free space. Fails with a
/// message naming the folder, the holder or the numbers.
fn take_ownership(cfg: &Config) -> Result<Ownership, String> {
    let data_dir = &cfg.server.data_dir;
    cfg.check_data_dir()?;
    spillway_wab::storage::create_dir_durable(&FsStorage, data_dir)
        .map_err(|e| format!("creating the data folder {}: {e}", data_dir.display()))?;
    let data = DataDirLock::acquire(data_dir)?;
    let limit = crate::fd_limit::raise_soft_limit()
        .map_err(|e| format!("reading the file descriptor limit: {e}"))?;
    crate::fd_limit::check_config(limit, cfg, cfg.sinks.len())?;
    warn_if_disk_smaller(cfg);
    let mut locks = Vec::new();
    for (what, path) in [
        ("server.socket_path", &cfg.server.socket_path),
        ("admin.socket_path", &cfg.admin.socket_path),
    ] {
        ensure_socket_folder(path).map_err(|e| format!("{what}: {e}"))?;
        locks.push(SocketLock::acquire(path).map_err(|e| format!("{what}: {e}"))?);
    }
    let admin = locks.pop().expect("two socket locks");
    let socket = locks.pop().expect("two socket locks");
    Ok(Ownership {
        _data: data,
        _socket: socket,
        _admin: admin,
    })
}

/// `wab.wab_bytes_max` above the data folder's free space means the disk,
/// not the budget, will stop producers: say so at start.
fn warn_if_disk_smaller(cfg: &Config) {
    let Some(free) = free_bytes(&cfg.server.data_dir) else {
        return;
    };
    if cfg.wab.wab_bytes_max > free {
        tracing::warn!(
            data_dir = %cfg.server.data_dir.display(),
            free_bytes = free,
            wab_bytes_max = cfg.wab.wab_bytes_max,
            "wab.wab_bytes_max is larger than the free space of the data folder: the disk will fill before the budget does (pushes then get Overloaded until delivery frees space); lower wab.wab_bytes_max to fit"
        );
    }
}

/// Bytes available to this user on the file system holding `dir`.
pub fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct to fill.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

fn start(
    cfg: Config,
    access: SocketAccess,
    origin: &str,
    config_path: Option<PathBuf>,
    watch_config: bool,
) -> Result<(), String> {
    let insecure_ok = cfg.server.allow_insecure_socket_dir;
    let std_listener = bind_socket(&cfg.server.socket_path, insecure_ok, access)
        .map_err(|e| format!("server.socket_path: {e}"))?;
    // The admin socket can reload, requeue and drop: never opened to a group.
    let admin_listener = bind_socket(&cfg.admin.socket_path, insecure_ok, SocketAccess::PRIVATE)
        .map_err(|e| format!("admin.socket_path: {e}"))?;
    let metrics_listener = bind_metrics(&cfg)?;
    let http_door = bind_http_ingest(&cfg)?;
    let tcp_door = bind_tcp_door(&cfg)?;
    let (built, env) = build_sinks_at_start(&cfg)?;
    let sink_description = describe_sinks(&built);
    let (sinks, dead_letters, requeue_stores) = open_sink_stores(&cfg, built)?;
    let shard_count = shards_to_serve(&cfg)?;
    let wab = WabBudget::new(cfg.wab.wab_bytes_max);
    let mut recovered = recover_shards(
        &cfg,
        shard_count,
        &wab,
        &sinks,
        &dead_letters,
        &requeue_stores,
    )?;
    let shards = std::mem::take(&mut recovered.shards);
    let board = delivery_board(std::mem::take(&mut recovered.retentions), &sinks, &shards);
    let arbiters = connection_arbiters();
    let conn_ctx = connection_context(&cfg);
    let doors = start_doors(
        std_listener,
        tcp_door,
        http_door,
        &cfg,
        &conn_ctx,
        &arbiters,
        &shards,
    );
    let status = announce(
        &cfg,
        origin,
        shard_count,
        &sink_description,
        &recovered,
        wab.used(),
    );
    let queues: Vec<Arc<ShardQueue>> = shards.iter().map(|s| s.queue.clone()).collect();
    let children = Children {
        conn_ctx: conn_ctx.clone(),
        arbiters,
        listener: doors.listener,
        network_doors: doors.network,
        shards,
        sinks,
        dead_letters: dead_letters.clone(),
        requeue: requeue_stores.clone(),
        board: board.clone(),
    };
    let supervisor = Supervisor::new(cfg.clone(), children).start();
    let reloader = Rc::new(RefCell::new(
        Reloader::new(config_path, cfg.clone(), supervisor.clone(), env).with_tls(doors.tls),
    ));
    let reload_stats = reloader.borrow().stats.clone();
    let for_admin = reloader.clone();
    let admin_state = AdminState {
        shards: queues,
        board,
        data_dir: cfg.server.data_dir.clone(),
        wab: wab.clone(),
        stats: conn_ctx.stats.clone(),
        read_budget: conn_ctx.read_budget.clone(),
        live_connections: conn_ctx.live.clone(),
        dead_letters,
        requeue: requeue_stores,
        reload: Some(Box::new(move || {
            Box::pin(Reloader::reload(for_admin.clone()))
        })),
        reload_stats,
        connections_max: u64::from(cfg.admin.connections_max),
        admin_socket: Arc::new(ListenerLoad::new("admin socket")),
        metrics_http: Arc::new(ListenerLoad::new("metrics address")),
        ready_stall: std::time::Duration::from_millis(cfg.admin.ready_stall_ms),
        ready_requires_sinks: cfg.admin.ready_requires_sinks,
    };
    Admin::new(admin_listener, metrics_listener, admin_state).start();
    spawn_signal_handlers(supervisor);
    spawn_reload_triggers(reloader, watch_config);
    spawn_memory_trim(conn_ctx.read_budget.clone());
    // The socket listens and every shard is recovered: a producer that
    // connects now is answered.
    crate::notify::ready(&status);
    crate::notify::spawn_watchdog();
    Ok(())
}

/// Say where the daemon listens and what its shards hold (the log, and
/// the start-up line on stdout); the status line for systemd.
fn announce(
    cfg: &Config,
    origin: &str,
    shard_count: u32,
    sink_description: &str,
    recovered: &RecoveredShards,
    wab_bytes_used: u64,
) -> String {
    tracing::info!(
        config = origin,
        socket = %cfg.server.socket_path.display(),
        data_dir = %cfg.server.data_dir.display(),
        shards = shard_count,
        pending_records = recovered.records - recovered.delivered,
        delivered_records = recovered.delivered,
        recovered_segments = recovered.segments,
        wab_bytes_used,
        "spillway is listening"
    );
    // Records kept from the last run: those some sink has not confirmed,
    // and those every sink has (their segment is deleted once read past).
    say(&format!(
        "spillway listening on {} (data in {}, {} shards, sink: {}, config: {}); {} records pending delivery, {} already delivered, in {} segments",
        cfg.server.socket_path.display(),
        cfg.server.data_dir.display(),
        shard_count,
        sink_description,
        origin,
        recovered.records - recovered.delivered,
        recovered.delivered,
        recovered.segments
    ));
    format!(
        "listening on {} ({shard_count} shards, sink: {sink_description})",
        cfg.server.socket_path.display()
    )
}

/// `admin.metrics_address`, bound (non-blocking), when it is set.
fn bind_metrics(cfg: &Config) -> Result<Option<std::net::TcpListener>, String> {
    Ok(match &cfg.admin.metrics_address {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("admin.metrics_address {addr}: {e}"))?;
            l.set_nonblocking(true)
                .map_err(|e| format!("admin.metrics_address {addr}: {e}"))?;
            let address = l
                .local_addr()
                .map_or_else(|_| addr.to_string(), |a| a.to_string());
            tracing::info!(%address, "serving GET /metrics, /health and /ready (admin.metrics_address)");
            Some(l)
        }
        None => None,
    })
}

/// Every configured sink built off this thread under the build deadline
/// (as at a reload: a plugin or endpoint that hangs makes the start fail
/// with the reason), probed once; with the environment they were built in.
fn build_sinks_at_start(cfg: &Config) -> Result<(Vec<BuiltSink>, SinkEnv), String> {
    let to_build: Vec<(String, SinkConfig)> = cfg
        .sinks
        .iter()
        .map(|(n, s)| (n.clone(), s.clone()))
        .collect();
    let deadline = build_timeout(&to_build);
    let env = SinkEnv {
        instance_id: spillway_wab::instance::instance_id(&FsStorage, &cfg.server.data_dir)
            .map_err(|e| format!("the instance id in {}: {e}", cfg.server.data_dir.display()))?,
    };
    let build_env = env.clone();
    let built = build_on_thread(deadline, move || build_sinks(&to_build, &build_env))?.wait()??;
    probe_sinks_at_start(&built);
    Ok((built, env))
}

/// What the start-up line says of the sinks: one sink named default (a
/// `[sink]` table) is just its description.
fn describe_sinks(built: &[BuiltSink]) -> String {
    match built {
        [one] if one.name == DEFAULT_SINK => one.description.clone(),
        all => all
            .iter()
            .map(|b| format!("{} = {}", b.name, b.description))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Each built sink with its dead-letter and requeue stores opened; and
/// the stores of sinks no longer configured, which stay readable.
fn open_sink_stores(
    cfg: &Config,
    built: Vec<BuiltSink>,
) -> Result<(BTreeMap<String, SinkRun>, DeadLetterStores, RequeueStores), String> {
    let dead_letters: DeadLetterStores = Arc::default();
    let requeue_stores: RequeueStores = Arc::default();
    let mut sinks = BTreeMap::new();
    for b in built {
        let store = open_dead_letters(&cfg.server.data_dir, &b.name)?;
        dead_letters
            .lock()
            .unwrap()
            .insert(b.name.clone(), store.clone());
        let requeue = open_requeue(&cfg.server.data_dir, &b.name)?;
        requeue_stores
            .lock()
            .unwrap()
            .insert(b.name.clone(), requeue.clone());
        let run = SinkRun {
            start: b.settings.start(),
            slot: SinkSlot::new(b.factory, b.settings),
            dead_letters: store,
            requeue,
        };
        sinks.insert(b.name, run);
    }
    // Stores of sinks no longer configured stay readable (`ctl dead-letter
    // list --sink NAME`): their records are never dropped silently. The
    // single-sink layout's store is `default`'s, configured or not.
    let legacy = cfg.server.data_dir.join(spillway_wab::DEAD_LETTER_DIR);
    if legacy.is_dir() && !sinks.contains_key(DEFAULT_SINK) {
        let store = open_dead_letters(&cfg.server.data_dir, DEFAULT_SINK)?;
        dead_letters
            .lock()
            .unwrap()
            .insert(DEFAULT_SINK.to_string(), store);
    }
    for name in sinks_on_disk(&cfg.server.data_dir) {
        let mut stores = dead_letters.lock().unwrap();
        if let std::collections::btree_map::Entry::Vacant(slot) = stores.entry(name) {
            let store = open_dead_letters(&cfg.server.data_dir, slot.key())?;
            slot.insert(store);
        }
    }
    Ok((sinks, dead_letters, requeue_stores))
}

/// The shards recovered and started, with what their recovery found.
struct RecoveredShards {
    shards: Vec<ShardSlot>,
    retentions: Vec<Arc<RetentionStats>>,
    records: u64,
    delivered: u64,
    segments: usize,
}

/// Recover every shard (before any push is accepted) and start its
/// flusher, retention and one drain per sink.
fn recover_shards(
    cfg: &Config,
    shard_count: u32,
    wab: &Arc<WabBudget>,
    sinks: &BTreeMap<String, SinkRun>,
    dead_letters: &DeadLetterStores,
    requeue_stores: &RequeueStores,
) -> Result<RecoveredShards, String> {
    let mut shards = Vec::new();
    let mut retentions = Vec::new();
    let mut recovered_records = 0;
    let mut recovered_delivered = 0;
    let mut recovered_segments = 0;
    let seen = seen_in_stores(dead_letters, requeue_stores)
        .map_err(|e| format!("reading the dead-letter and requeue stores: {e}"))?;
    for shard in 0..shard_count {
        let queue = ShardQueue::new(shard, wab);
        let shard_seen = seen.get(&shard).copied().unwrap_or(0);
        let (addr, report, floor) = Supervisor::start_shard(cfg, queue.clone(), shard_seen)
            .map_err(|e| {
                format!(
                    "recovering shard {shard} in {}: {e}",
                    cfg.server.data_dir.display()
                )
            })?;
        recovered_records += report.record_count();
        recovered_delivered += report.records_below(floor);
        recovered_segments += report.segments.len();
        log_recovery(shard, &report);
        let dir = shard_dir(&cfg.server.data_dir, shard);
        let names: Vec<String> = sinks.keys().cloned().collect();
        let retention_stats = Arc::new(RetentionStats::default());
        let retention = Retention::open(
            FsStorage,
            shard,
            dir,
            queue.clone(),
            &names,
            retention_stats.clone(),
        )
        .map_err(|e| format!("opening delivery of shard {shard}: {e}"))?;
        let retention = Arc::new(Mutex::new(retention));
        let mut drains = BTreeMap::new();
        for (name, run) in sinks {
            let stats = Arc::new(DrainStats::default());
            let control = Arc::new(CursorControl::default());
            let addr = start_drain(
                &cfg.server.data_dir,
                queue.clone(),
                retention.clone(),
                name,
                run,
                stats.clone(),
                control.clone(),
            )
            .map_err(|e| format!("starting delivery of shard {shard} to sink {name}: {e}"))?;
            drains.insert(name.clone(), DrainSlot::new(addr, stats, control));
        }
        retentions.push(retention_stats);
        shards.push(ShardSlot::new(queue, addr, retention, drains));
    }
    Ok(RecoveredShards {
        shards,
        retentions,
        records: recovered_records,
        delivered: recovered_delivered,
        segments: recovered_segments,
    })
}

/// What a shard's recovery found, at the level it deserves: losses found
/// now are errors, repairs warnings.
fn log_recovery(shard: u32, report: &spillway_wab::RecoveryReport) {
    // Resealing an unsealed segment at its last record is routine after
    // a crash; only cut bytes or quarantined files are a repair.
    let repaired = !report.quarantined.is_empty()
        || report.resealed.iter().any(|r| r.2 > 0)
        || !report.salvaged.is_empty()
        || !report.footers_repaired.is_empty()
        || !report.headers_repaired.is_empty()
        || !report.cut_short.is_empty()
        || report.untrusted_checkpoint.is_some()
        || report.gaps.iter().any(|g| g.new);
    // Losses found now are errors; ones an earlier start already
    // reported (their .reason files exist) are only mentioned.
    let newly_lost = report.new_losses();
    if newly_lost > 0 {
        tracing::error!(
            shard,
            lost_records = newly_lost,
            gaps = report.gaps.iter().filter(|g| g.new).count(),
            salvaged_segments = report.salvaged.len(),
            "acknowledged records are missing or damaged in this shard (see the lines above and quarantine/*.reason); every other record is delivered"
        );
    } else if report.lost_records > 0 {
        tracing::info!(
            shard,
            lost_records = report.lost_records,
            "records lost before an earlier start are still recorded in quarantine/*.reason"
        );
    }
    if repaired && newly_lost == 0 {
        tracing::warn!(
            shard,
            resealed = report.resealed.len(),
            quarantined = report.quarantined.len(),
            headers_repaired = report.headers_repaired.len(),
            "recovery repaired this shard (see the lines above)"
        );
    }
}

/// Every sink's figures, for the admin side.
fn delivery_board(
    retentions: Vec<Arc<RetentionStats>>,
    sinks: &BTreeMap<String, SinkRun>,
    shards: &[ShardSlot],
) -> Arc<DeliveryBoard> {
    let board = Arc::new(DeliveryBoard::new(retentions));
    for (name, run) in sinks {
        board.insert(
            name,
            SinkFigures {
                description: run.slot.description(),
                shards: shards
                    .iter()
                    .map(|s| s.drains[name].stats.clone())
                    .collect(),
                controls: shards
                    .iter()
                    .map(|s| s.drains[name].control.clone())
                    .collect(),
            },
        );
    }
    board
}

/// One connection arbiter per core.
fn connection_arbiters() -> Vec<ArbiterHandle> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (0..cores).map(|_| Arbiter::new().handle()).collect()
}

/// What the Unix socket's connections share: the limits of `[server]`,
/// the daemon's counters, its read-buffer budget.
fn connection_context(cfg: &Config) -> Arc<ConnectionContext> {
    Arc::new(ConnectionContext {
        limits: ConnectionLimits {
            payload_bytes_max: cfg.server.payload_bytes_max as u32,
            read_timeout: cfg.read_timeout(),
            idle_timeout: cfg.idle_timeout(),
            read_buffer_bytes_max: cfg.server.read_buffer_bytes_max,
            inflight_records_max: cfg.server.inflight_records_max as usize,
            inflight_bytes_max: cfg.server.inflight_bytes_max,
            evict_idle_after: cfg.evict_idle_after(),
            peers: cfg.server.peer_filter(),
        },
        stats: Arc::new(DaemonStats::default()),
        live: Arc::new(AtomicUsize::new(0)),
        read_budget: Arc::new(ReadBudget::default()),
        stopping: std::sync::atomic::AtomicBool::new(false),
        idle: Default::default(),
    })
}

/// The doors, started: the Unix socket's listener (which the supervisor
/// restarts should it die), the network doors configured (the TCP door,
/// the HTTP door), and the TLS servers a reload refreshes.
struct Doors {
    listener: Addr<Listener>,
    network: Vec<Recipient<StopListening>>,
    tls: Vec<Arc<TlsServer>>,
}

fn start_doors(
    std_listener: std::os::unix::net::UnixListener,
    tcp_door: Option<TcpDoorParts>,
    http_door: Option<HttpDoorParts>,
    cfg: &Config,
    conn_ctx: &Arc<ConnectionContext>,
    arbiters: &[ArbiterHandle],
    shards: &[ShardSlot],
) -> Doors {
    let listener = Listener::new(
        std_listener,
        conn_ctx.clone(),
        arbiters.to_vec(),
        shards.iter().map(|s| s.queue.clone()).collect(),
        cfg.server.connections_max as usize,
    )
    .start();
    let mut tls_doors = Vec::new();
    let mut network = Vec::new();
    if let Some((listener, connections_max, tls)) = tcp_door {
        tls_doors.extend(tls.clone());
        // The door's own count of open connections (its connections_max)
        // and idle registry; the daemon's stats and read-buffer budget.
        let ctx = Arc::new(ConnectionContext {
            limits: conn_ctx.limits.clone(),
            stats: conn_ctx.stats.clone(),
            live: conn_ctx.stats.tcp.connections_open.clone(),
            read_budget: conn_ctx.read_budget.clone(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            idle: Default::default(),
        });
        let door = TcpDoor::new(
            listener,
            ctx,
            arbiters.to_vec(),
            shards.iter().map(|s| s.queue.clone()).collect(),
            connections_max,
            tls,
        );
        network.push(door.start().recipient());
    }
    if let Some((listener, settings, tls)) = http_door {
        tls_doors.extend(tls.clone());
        let door = HttpIngest::new(
            listener,
            settings,
            shards.iter().map(|s| s.queue.clone()).collect(),
            arbiters.to_vec(),
            conn_ctx.stats.clone(),
            conn_ctx.read_budget.clone(),
            tls,
        );
        network.push(door.start().recipient());
    }
    Doors {
        listener,
        network,
        tls: tls_doors,
    }
}

/// With `--watch-config`: how often the config file is looked at.
const CONFIG_POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// SIGHUP reloads; with `--watch-config` so does a change of the file
/// (polled every [`CONFIG_POLL_EVERY`], applied once its mtime and size have
/// been stable for one poll).
fn spawn_reload_triggers(reloader: Rc<RefCell<Reloader>>, watch_config: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    let on_hup = reloader.clone();
    actix_rt::spawn(async move {
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::error!("could not install the SIGHUP handler; use `spillway ctl reload`");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            let _ = Reloader::reload(on_hup.clone()).await;
        }
    });
    if watch_config {
        actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(CONFIG_POLL_EVERY);
            loop {
                tick.tick().await;
                let changed = reloader.borrow_mut().poll_file();
                if changed {
                    let _ = Reloader::reload(reloader.clone()).await;
                }
            }
        });
    }
}

/// The configured shard count, raised to cover every `shard-NNN` folder
/// already in the data folder: a shard's records must never be orphaned
/// because the machine now has fewer cores or the setting was lowered.
fn shards_to_serve(cfg: &Config) -> Result<u32, String> {
    let configured = cfg.shard_count();
    let mut highest: Option<u32> = None;
    match std::fs::read_dir(&cfg.server.data_dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(n) = name.to_str().and_then(spillway_wab::layout::shard_number) else {
                    continue;
                };
                highest = Some(highest.map_or(n, |h| h.max(n)));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("reading {}: {e}", cfg.server.data_dir.display())),
    }
    let existing = highest.map_or(0, |h| h + 1);
    if existing > configured {
        tracing::warn!(
            configured,
            existing,
            data_dir = %cfg.server.data_dir.display(),
            "the data folder holds more shards than server.shards asks for; serving all {existing} so no record is orphaned"
        );
        return Ok(existing);
    }
    Ok(configured)
}

fn spawn_signal_handlers(supervisor: Addr<Supervisor>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let supervisor = supervisor.clone();
        actix_rt::spawn(async move {
            let Ok(mut s) = signal(kind) else {
                tracing::error!("could not install a signal handler");
                return;
            };
            if s.recv().await.is_some() {
                supervisor.do_send(Shutdown);
            }
        });
    }
}

/// The HTTP door's listener, settings and TLS, bound.
type HttpDoorParts = (
    std::net::TcpListener,
    HttpIngestSettings,
    Option<Arc<TlsServer>>,
);

/// The TCP door's listener, connection cap and TLS, bound.
type TcpDoorParts = (std::net::TcpListener, usize, Option<Arc<TlsServer>>);

/// A network door's TLS loaded (a handshake held to `handshake`) and its
/// address bound (logged with `serving`, what it serves); an error names
/// the key.
fn bind_door(
    door: &DoorConfig,
    handshake: std::time::Duration,
    serving: &str,
) -> Result<(std::net::TcpListener, Option<Arc<TlsServer>>), String> {
    let tls = match door.tls_files() {
        Some(files) => Some(TlsServer::load(files, handshake)?),
        None => None,
    };
    let addr = door.address().map_err(|e| e.to_string())?;
    let key = door.key("listen");
    let listener = std::net::TcpListener::bind(addr).map_err(|e| format!("{key} {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .and_then(|()| spillway_actors::ingest::accept::raise_backlog(&listener))
        .map_err(|e| format!("{key} {addr}: {e}"))?;
    let bound = listener.local_addr().map_or(addr, |a| a);
    tracing::info!(address = %bound, tls = tls.is_some(), mutual_tls = door.ca_file.is_some(), "serving {serving} ({})", door.table);
    Ok((listener, tls))
}

/// `[server.http]`, ready to serve: its TLS loaded, its token read, its
/// address bound. `None` when it is off; an error names the key.
fn bind_http_ingest(cfg: &Config) -> Result<Option<HttpDoorParts>, String> {
    let Some(http) = &cfg.server.http else {
        return Ok(None);
    };
    let token = http.own.token().map_err(|e| e.to_string())?;
    let idle_timeout = std::time::Duration::from_millis(http.own.idle_timeout_ms);
    let (listener, tls) = bind_door(&http.door, idle_timeout, "POST /v1/records")?;
    if token.is_some() {
        tracing::info!(
            "[server.http] asks every request for the bearer token of server.http.token_env"
        );
    }
    let settings = HttpIngestSettings {
        body_bytes_max: http.own.body_bytes_max,
        payload_bytes_max: cfg.server.payload_bytes_max as u32,
        connections_max: http.door.connections_max as usize,
        request_timeout: std::time::Duration::from_millis(http.own.request_timeout_ms),
        idle_timeout,
        token,
        read_buffer_bytes_max: cfg.server.read_buffer_bytes_max,
    };
    Ok(Some((listener, settings, tls)))
}

/// `[server.tcp]`, ready to serve: its TLS loaded and its address bound.
/// `None` when it is off; an error names the key.
fn bind_tcp_door(cfg: &Config) -> Result<Option<TcpDoorParts>, String> {
    let Some(tcp) = &cfg.server.tcp else {
        return Ok(None);
    };
    let handshake = std::time::Duration::from_millis(tcp.own.handshake_timeout_ms);
    let (listener, tls) = bind_door(&tcp.door, handshake, "the wire protocol over TCP")?;
    Ok(Some((listener, tcp.door.connections_max as usize, tls)))
}

/// Each sink's health check once at the start, each on a thread of its own
/// (a host that drops packets must not hold the start back): one that
/// fails is a warning, the same one `spillway check` gives, and the daemon
/// starts all the same and delivers once the sink answers. Without it a
/// daemon with nothing to deliver said nothing about a sink it could not
/// reach.
fn probe_sinks_at_start(built: &[crate::sinks::BuiltSink]) {
    for b in built {
        let target = b.probe_target();
        let probe = move || {
            if let Some(why) = crate::sinks::probe_all(std::slice::from_ref(&target)).pop() {
                tracing::warn!(sink = %target.0, "{why} at the start; the daemon delivers to it once it answers (records are kept meanwhile)");
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name(format!("sink-probe-{}", b.name))
            .spawn(probe)
        {
            tracing::debug!(sink = %b.name, error = %e, "could not start the sink's health probe");
        }
    }
}
