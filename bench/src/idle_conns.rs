//! `idle_connections`: what idle connections cost. A daemon of its own
//! (noop sink, `server.connections_max` above the count) gets 0, 1,000 and
//! 10,000 producer connections that connect and then say nothing; for each
//! count the bench reads the daemon's resident memory and times one serial
//! Sync producer beside them. The descriptor limit of the bench (and so of
//! the daemon it starts) is raised to its hard limit first; a count that
//! does not fit under it is skipped with the reason.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use spillway_protocol::Tier;

use crate::context::Ctx;
use crate::daemon::{self, Overrides};
use crate::e2e::{launcher, stop_daemon};
use crate::load::{self, LoadError};
use crate::report::{Kind, ReportRow};

/// The counts measured, after the baseline of none.
const COUNTS: [usize; 2] = [1_000, 10_000];

pub fn idle_connections(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let limit = raise_fd_limit();
    let most = *COUNTS.last().unwrap();
    let overrides = Overrides {
        connections_max: Some((most + 64) as u32),
        ..Overrides::default()
    };
    let daemon = launcher
        .start("idle-connections", &overrides)
        .map_err(LoadError::Failed)?;
    let settle = || std::thread::sleep(Duration::from_millis(if ctx.quick { 500 } else { 1500 }));
    let rss = || daemon::rss_kib(daemon.pid()).unwrap_or(0);
    settle();
    let rss_none = rss();
    let alone = load::serial_push(daemon.socket(), Tier::Sync, ctx.plan)?;
    let q = |s: &load::Sample, p: f64| s.latency.value_at_quantile(p) as f64 / 1000.0;
    let mut rows = Vec::new();
    let mut open: Vec<UnixStream> = Vec::new();
    for count in COUNTS {
        let name = format!("idle_connections/{count}");
        // The producer's own connection, the bench's files, a margin.
        if (count + 256) as u64 > limit {
            rows.push(ReportRow::skipped(
                &name,
                Kind::Scenario,
                format!("the descriptor limit is {limit}: raise `ulimit -Hn`"),
            ));
            continue;
        }
        while open.len() < count {
            let c = UnixStream::connect(daemon.socket()).map_err(|e| {
                LoadError::Failed(format!("idle connection {}: {e}", open.len() + 1))
            })?;
            open.push(c);
        }
        // Past the daemon's 1 s of keeping a buffer for a quiet connection.
        settle();
        let held = rss();
        let with = load::serial_push(daemon.socket(), Tier::Sync, ctx.plan)?;
        let mut o = with.to_outcome(&name);
        o.set("idle_connections", count as f64)
            .set("rss_mib", held as f64 / 1024.0)
            .set("rss_mib_without", rss_none as f64 / 1024.0)
            .set(
                "kib_per_idle_connection",
                held.saturating_sub(rss_none) as f64 / count as f64,
            )
            .set("alone_p99_us", q(&alone, 0.99))
            .set("p99_ratio", q(&with, 0.99) / q(&alone, 0.99).max(1e-9))
            .set("p50_ratio", q(&with, 0.5) / q(&alone, 0.5).max(1e-9));
        rows.push(o);
    }
    drop(open);
    stop_daemon(daemon, "idle-connections")?;
    Ok(rows)
}

/// Raise this process's soft descriptor limit to its hard limit (the
/// daemon it starts inherits it); the limit now.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}
