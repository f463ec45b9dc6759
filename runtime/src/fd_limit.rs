//! File descriptors: raise the soft limit at start, and refuse a
//! `connections_max` that would leave the shards without descriptors.
//!
//! Every connection holds one descriptor. Measured before this existed:
//! with a 1,024-descriptor limit and the default `connections_max = 1024`,
//! 1,100 idle connections made segment rotation fail for lack of a
//! descriptor and the shard stopped. So the connections may use only what
//! is left after a reserve for the WAB (active and spare segments, the
//! sealer's and drain's files, checkpoints, the dead-letter store), the
//! sinks (HTTP connections, plugin files) and the admin listeners, whose
//! connections are capped (`admin.connections_max` each) and set aside
//! here too: measured before they were, 1,500 connections held open to the
//! metrics address took every descriptor, and pushes, checkpoint writes,
//! seals and rotation all failed with EMFILE.

/// Descriptors kept for everything but producer connections, besides the
/// per-shard share below.
pub const FD_RESERVE: u64 = 64;
/// Descriptors one shard may hold at once: active segment, spare being
/// preallocated, segment being sealed, drain reader, checkpoint, directory
/// fsyncs, with headroom.
pub const FDS_PER_SHARD: u64 = 8;
/// Descriptors each sink's cursor over a shard may hold: the segment it
/// reads, and its cursor file, kept open between fdatasyncs (opening it
/// for every batch made every push's fdatasync slower; see
/// `spillway_wab::CheckpointWriter`).
pub const FDS_PER_SINK_SHARD: u64 = 2;

/// The soft `RLIMIT_NOFILE` after raising it as far as the hard limit allows.
pub fn raise_soft_limit() -> std::io::Result<u64> {
    let lim = nofile()?;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                from = lim.rlim_cur,
                to = lim.rlim_max,
                "raised the soft file descriptor limit to the hard limit"
            );
            return Ok(lim.rlim_max);
        }
    }
    Ok(lim.rlim_cur)
}

/// The soft `RLIMIT_NOFILE` as it stands.
pub fn soft_limit() -> std::io::Result<u64> {
    Ok(nofile()?.rlim_cur)
}

/// The soft and hard `RLIMIT_NOFILE`.
fn nofile() -> std::io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim)
}

/// [`check`] for `cfg`'s connection limits, shards and admin listeners,
/// with `sinks` sinks (a reload checks the sinks it would run).
pub fn check_config(limit: u64, cfg: &crate::config::Config, sinks: usize) -> Result<(), String> {
    check(
        limit,
        cfg.producer_connections_max(),
        &cfg.producer_connections_keys(),
        u64::from(cfg.shard_count()),
        sinks as u64,
        cfg.admin_connections_reserved(),
    )
}

/// Refuse `connections_max` when `limit` descriptors cannot hold them plus
/// the reserve (`admin_connections`: what the admin listeners may hold
/// together); the message names the numbers and the fixes.
pub fn check(
    limit: u64,
    connections_max: u64,
    doors: &str,
    shards: u64,
    sinks: u64,
    admin_connections: u64,
) -> Result<(), String> {
    let reserve =
        FD_RESERVE + (FDS_PER_SHARD + FDS_PER_SINK_SHARD * sinks) * shards + admin_connections;
    if connections_max.saturating_add(reserve) <= limit {
        return Ok(());
    }
    let fits = limit.saturating_sub(reserve);
    let together = if doors.contains('+') { " together" } else { "" };
    Err(format!(
        "{doors} = {connections_max} does not fit the file descriptor limit of {limit}: \
         {reserve} are kept for segments, checkpoints, sinks and admin ({FD_RESERVE} + ({FDS_PER_SHARD} per shard \
         + {FDS_PER_SINK_SHARD} per sink x {sinks} sinks) x {shards} shards + {admin_connections} for the admin listeners' connections, admin.connections_max \
         each), so at most {fits} connections fit; lower {doors} to {fits}{together} or raise \
         the limit (ulimit -n, or LimitNOFILE= in the systemd unit)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_max_must_leave_the_reserve() {
        let doors = "server.connections_max";
        check(20_000, 1024, doors, 2, 1, 32).unwrap();
        let err = check(1024, 1024, doors, 2, 1, 32).unwrap_err();
        assert!(err.contains("server.connections_max = 1024"), "{err}");
        assert!(err.contains("limit of 1024"), "{err}");
        assert!(err.contains("+ 32 for the admin listeners"), "{err}");
        // 64 + (8 + 2 x 1) x 2 + 32 = 116 kept.
        assert!(err.contains("at most 908 connections"), "{err}");
        check(1024, 908, doors, 2, 1, 32).unwrap();
        check(1024, 909, doors, 2, 1, 32).unwrap_err();
        // Three sinks keep 2 x 2 x 2 more.
        check(1024, 900, doors, 2, 3, 32).unwrap();
        check(1024, 901, doors, 2, 3, 32).unwrap_err();
    }
}
