//! The Unix socket's listener: owns the socket, accepts connections, enforces
//! `connections_max`, and starts each Connection on one of the connection
//! arbiters (round robin, one per core), pinned to a shard.
//!
//! [`bind_socket`] prepares the socket file: parent folder created 0700 if
//! missing, a folder another user could write refused (see
//! [`crate::ingest::socket_dir`]), a stale socket left by a dead daemon replaced, a
//! live one refused, the new socket given its group and mode
//! ([`SocketAccess`]: 0600 unless the operator opens it to a group). It is
//! created under a restrictive umask, so it is reachable by no one else
//! before its group is set and its mode applied, even for an instant.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::StopListening;
use crate::ingest::accept::AcceptErrors;
use crate::ingest::connection::{Connection, ConnectionContext, NEXT_CONNECTION_ID};
use crate::ingest::door::{start_accepting, Door, RoundRobin};
use crate::ingest::socket_dir::{check_socket_dir, InsecureSocketDir, SocketAccess};
use crate::ingest::transport::Stream;
use crate::shard::ShardQueue;
use crate::stats::DaemonStats;

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another spillway daemon is already listening on {0} (stop it, or set server.socket_path to another path)")]
    InUse(PathBuf),
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("creating socket folder {path}: {source}")]
    Folder { path: PathBuf, source: io::Error },
    #[error("binding {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error("giving {path} the group gid {gid} (server.socket_group): {source}; the daemon's user must be root or a member of that group")]
    Group {
        path: PathBuf,
        gid: u32,
        source: io::Error,
    },
    #[error("setting the mode of {path} to {mode:04o}: {source}")]
    Mode {
        path: PathBuf,
        mode: u32,
        source: io::Error,
    },
    #[error("refusing to put a socket where another user could replace it: {0} (fix the folder's owner or mode, see docs/security.md; or accept the risk with server.allow_insecure_socket_dir = true)")]
    InsecureFolder(InsecureSocketDir),
}

/// Bind the daemon's socket, replacing a stale one, and give it `access`
/// before anyone can connect. The socket's folder must pass
/// [`check_socket_dir`]; with `allow_insecure_dir` a failing folder is only
/// warned about (at every start).
pub fn bind_socket(
    path: &Path,
    allow_insecure_dir: bool,
    access: SocketAccess,
) -> Result<StdUnixListener, BindError> {
    ensure_socket_folder(path)?;
    if let Some(insecure) = check_socket_path(path, allow_insecure_dir)? {
        tracing::warn!(socket = %path.display(), folder = %insecure.folder.display(), why = %insecure.why, "server.allow_insecure_socket_dir = true: another user could replace this socket and receive its records");
    }
    if std::fs::symlink_metadata(path).is_ok() {
        match StdUnixStream::connect(path) {
            Ok(_) => return Err(BindError::InUse(path.to_path_buf())),
            Err(_) => {
                tracing::info!(path = %path.display(), "replacing a stale socket left by a daemon that is gone");
                let _ = std::fs::remove_file(path);
            }
        }
    }
    // SAFETY: umask is process-wide but only affects file creation; bind is
    // the only creation in flight during start-up.
    let old = unsafe { libc::umask(0o177) };
    let bound = StdUnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = bound.map_err(|source| BindError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    apply_access(path, access)?;
    listener
        .set_nonblocking(true)
        .map_err(|source| BindError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(listener)
}

/// What [`bind_socket`] refuses before it binds, checked without creating
/// or binding anything (so `spillway check` and `run` agree): a folder
/// another user could write (unless `allow_insecure_dir`: then it is
/// returned, to be warned about), a path that exists and is not a socket.
/// A folder that does not exist yet is made 0700 by `bind_socket`, so only
/// an existing one is checked.
pub fn check_socket_path(
    path: &Path,
    allow_insecure_dir: bool,
) -> Result<Option<InsecureSocketDir>, BindError> {
    let mut allowed = None;
    if crate::ingest::socket_dir::socket_folder(path).exists() {
        if let Err(insecure) = check_socket_dir(path) {
            if !allow_insecure_dir {
                return Err(BindError::InsecureFolder(insecure));
            }
            allowed = Some(insecure);
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotASocket {
                path: path.to_path_buf(),
            });
        }
    }
    Ok(allowed)
}

/// Group first, then mode: widening the mode before the group is right
/// would open the socket, for an instant, to the daemon's own group.
fn apply_access(path: &Path, access: SocketAccess) -> Result<(), BindError> {
    debug_assert!(access.mode <= 0o777 && access.mode & 0o600 == 0o600);
    if let Some(gid) = access.gid {
        std::os::unix::fs::lchown(path, None, Some(gid)).map_err(|source| BindError::Group {
            path: path.to_path_buf(),
            gid,
            source,
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode)).map_err(|source| {
        BindError::Mode {
            path: path.to_path_buf(),
            mode: access.mode,
            source,
        }
    })
}

/// Create the socket's folder (0700) if it is missing.
pub fn ensure_socket_folder(path: &Path) -> Result<(), BindError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|source| BindError::Folder {
                    path: parent.to_path_buf(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// Accepts connections. Runs on the system arbiter.
pub struct Listener {
    listener: Option<StdUnixListener>,
    shared: Arc<ConnectionContext>,
    /// Arbiters connections are spread over.
    arbiters: RoundRobin<ArbiterHandle>,
    shards: RoundRobin<Arc<ShardQueue>>,
    connections_max: usize,
    /// Pauses the loop (instead of spinning) while accept fails, e.g. EMFILE.
    accept_errors: AcceptErrors,
}

impl Listener {
    pub fn new(
        listener: StdUnixListener,
        shared: Arc<ConnectionContext>,
        arbiters: Vec<ArbiterHandle>,
        shards: Vec<Arc<ShardQueue>>,
        connections_max: usize,
    ) -> Self {
        Listener {
            listener: Some(listener),
            shared,
            arbiters: RoundRobin::new(arbiters),
            shards: RoundRobin::new(shards),
            connections_max,
            accept_errors: AcceptErrors::new("producer"),
        }
    }

    fn on_accept(&mut self, stream: tokio::net::UnixStream) {
        if !self.peer_allowed(&stream) {
            return;
        }
        let live = self.shared.live.fetch_add(1, Ordering::Relaxed) + 1;
        if live > self.connections_max && !self.evict_idle() {
            self.shared.live.fetch_sub(1, Ordering::Relaxed);
            self.shared
                .stats
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            if self.shared.stats.log_limiter.allow() {
                tracing::warn!(
                    connections_max = self.connections_max,
                    "connection refused: server.connections_max reached"
                );
            }
            drop(stream);
            return;
        }
        self.shared
            .stats
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                self.shared.live.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "could not detach an accepted socket");
                return;
            }
        };
        let id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
        let arbiter = self.arbiters.next();
        let shard = self.shards.next().clone();
        let shared = self.shared.clone();
        // The socket must be registered with the runtime of the arbiter
        // that polls it, so it crosses as a std socket and is adopted there.
        let started =
            arbiter.spawn_fn(move || match tokio::net::UnixStream::from_std(std_stream) {
                Ok(stream) => {
                    Connection::new(id, Stream::Unix(stream), shard, shared).start();
                }
                Err(e) => {
                    shared.live.fetch_sub(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "could not register a connection on its arbiter");
                }
            });
        if !started {
            tracing::error!(conn = id, "connection arbiter is gone; connection dropped");
        }
    }
}

impl Listener {
    /// With `server.allowed_uids` / `allowed_gids`: whether the peer's
    /// credentials (SO_PEERCRED: its uid, gid and pid when it connected)
    /// let it in. A refused peer is counted and logged (at most once a
    /// second), and its socket closed before anything is read from it.
    fn peer_allowed(&self, stream: &tokio::net::UnixStream) -> bool {
        let Some(filter) = &self.shared.limits.peers else {
            return true;
        };
        let refused = match stream.peer_cred() {
            Ok(c) if filter.allows(c.uid(), c.gid()) => return true,
            Ok(c) => format!(
                "uid {} gid {} pid {}",
                c.uid(),
                c.gid(),
                c.pid().map_or("unknown".into(), |p| p.to_string())
            ),
            Err(e) => format!("credentials unreadable: {e}"),
        };
        self.shared
            .stats
            .connections_refused_peer
            .fetch_add(1, Ordering::Relaxed);
        if self.shared.stats.log_limiter.allow() {
            tracing::warn!(
                peer = %refused,
                allowed_uids = ?filter.uids,
                allowed_gids = ?filter.gids,
                "connection refused: the peer's uid and gid are not in server.allowed_uids / server.allowed_gids"
            );
        }
        false
    }

    /// At `connections_max`: close the longest-idle connection with nothing
    /// in flight, if eviction is on and one has been idle long enough (see
    /// [`crate::ingest::idle`]). The new connection then takes its place; until the
    /// evicted one is gone (microseconds) one more is open than the cap.
    fn evict_idle(&self) -> bool {
        let Some(after) = self.shared.limits.evict_idle_after else {
            return false;
        };
        let Some(id) = self.shared.idle.evict_one(after) else {
            return false;
        };
        self.shared
            .stats
            .connections_evicted
            .fetch_add(1, Ordering::Relaxed);
        if self.shared.stats.log_limiter.allow() {
            tracing::info!(
                connections_max = self.connections_max,
                evicted = id,
                "server.connections_max reached: closed the longest-idle connection (nothing in flight) to let a new one in"
            );
        }
        true
    }
}

/// How often the listener checks that its socket file is still its own.
const SOCKET_CHECK_EVERY: Duration = Duration::from_secs(1);

/// (device, inode) of a file, to tell one socket file from another.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Listener {
    /// Check every [`SOCKET_CHECK_EVERY`] that the socket's name still
    /// leads to this listener. If another process unlinked it (and maybe
    /// bound its own under the same name), producers connecting now reach
    /// that process, not this daemon: an ERROR says so (once per change),
    /// rather than nobody noticing. See docs/security.md.
    fn watch_socket_file(&self, listener: &StdUnixListener, ctx: &mut Context<Self>) {
        let Some(path) = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        else {
            return;
        };
        let Some(ours) = file_identity(&path) else {
            return;
        };
        let mut reported = false;
        ctx.run_interval(SOCKET_CHECK_EVERY, move |act, _| {
            if act.shared.stopping.load(Ordering::Acquire) {
                return;
            }
            let now = file_identity(&path);
            if now == Some(ours) {
                reported = false;
                return;
            }
            if !reported {
                reported = true;
                act.shared
                    .stats
                    .socket_replaced
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    socket = %path.display(),
                    state = if now.is_none() { "removed" } else { "replaced by another file" },
                    "the daemon's socket was removed or replaced by someone else: producers connecting now do not reach this daemon (restart it; check who can write the socket's folder, see docs/security.md)"
                );
            }
        });
    }
}

impl Actor for Listener {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let listener = self.listener.take();
        if let Some(l) = &listener {
            self.watch_socket_file(l, ctx);
        }
        start_accepting(self, ctx, listener);
    }
}

impl Door for Listener {
    type Listener = tokio::net::UnixListener;
    const TABLE: &'static str = "server";

    fn on_accept(&mut self, stream: tokio::net::UnixStream, _: tokio::net::unix::SocketAddr) {
        Listener::on_accept(self, stream)
    }

    fn accept_errors(&mut self) -> &mut AcceptErrors {
        &mut self.accept_errors
    }

    fn daemon_stats(&self) -> &DaemonStats {
        &self.shared.stats
    }
}

impl Handler<StopListening> for Listener {
    type Result = ();
    fn handle(&mut self, _: StopListening, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
