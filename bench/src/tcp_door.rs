//! `tcp_tls_door`: the wire protocol over TLS on loopback (`[server.tcp]`,
//! a throw-away CA and server certificate made with `openssl`) against the
//! Unix socket, on one daemon in one run, the order alternating by round:
//!
//! - serial Sync pushes: TLS p50 against the socket's (target: at most
//!   60 µs more);
//! - PushBatch of 256 Sync records, one at a time: TLS rate against the
//!   socket's (target: at least 80%);
//! - connection churn over TLS: connect (TCP and the handshake), one Sync
//!   push, close, back to back; its p50 and p99.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use spillway_client::{tls_config, Client, Options, Tier};
use spillway_test_nats::TlsFiles;

use super::context::Ctx;
use super::daemon::Overrides;
use super::load::{self, LoadError, Sample, PAYLOAD};
use super::report::ReportRow;

const BATCH: usize = 256;

fn connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Result<Client, LoadError> {
    Client::connect_tls(addr, "127.0.0.1", config.clone(), Options::default())
        .map_err(|e| LoadError::Failed(format!("TLS connect to {addr}: {e}")))
}

pub fn tcp_tls_door(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = super::e2e::launcher(ctx)?;
    let certs = tempfile::tempdir().map_err(|e| LoadError::Failed(e.to_string()))?;
    let files = TlsFiles::make(certs.path())
        .map_err(|e| LoadError::Unsupported(format!("making a certificate with openssl: {e}")))?;
    let addr = super::e2e::free_loopback_addr();
    let daemon = launcher
        .start(
            "tcp-tls",
            &Overrides {
                tcp_tls: Some((addr.to_string(), files.cert.clone(), files.key.clone())),
                ..Overrides::default()
            },
        )
        .map_err(|e| LoadError::Failed(format!("starting the TLS door daemon: {e}")))?;
    let config = tls_config(&files.ca, None).map_err(|e| LoadError::Failed(e.to_string()))?;
    let socket = daemon.socket().to_path_buf();
    let records = vec![PAYLOAD; BATCH];
    let plan = ctx.plan;
    let tls_serial = || {
        let started = Instant::now();
        let c = connect(addr, &config)?;
        load::serial_on(c, started, plan, 1, |c| c.push(Tier::Sync, PAYLOAD))
    };
    let unix_serial = || load::serial_push(&socket, Tier::Sync, plan);
    let tls_batch = || {
        let started = Instant::now();
        let c = connect(addr, &config)?;
        load::serial_on(c, started, plan, BATCH as u64, |c| {
            c.push_batch(Tier::Sync, &records).map(drop)
        })
    };
    let unix_batch = || load::serial_batch(&socket, Tier::Sync, BATCH, plan);
    let churn = || -> Result<Sample, LoadError> {
        load::measure(plan.duration, 1, || {
            let mut c = connect(addr, &config)?;
            c.push(Tier::Sync, PAYLOAD)
                .map_err(|e| LoadError::Failed(format!("push over TLS: {e}")))?;
            Ok(true)
        })
    };
    let (ts, us, tb, ub) = if ctx.round.is_multiple_of(2) {
        let ts = tls_serial()?;
        let us = unix_serial()?;
        let tb = tls_batch()?;
        (ts, us, tb, unix_batch()?)
    } else {
        let us = unix_serial()?;
        let ts = tls_serial()?;
        let ub = unix_batch()?;
        (ts, us, tls_batch()?, ub)
    };
    let ch = churn()?;
    let q = |s: &Sample, p: f64| s.latency.value_at_quantile(p) as f64 / 1000.0;
    let mut o = ts.to_outcome("tcp_tls_door");
    o.set("unix_serial_p50_us", q(&us, 0.5))
        .set("serial_p50_over_unix_us", q(&ts, 0.5) - q(&us, 0.5))
        .set("tls_batch256_records_per_s", tb.rate())
        .set("unix_batch256_records_per_s", ub.rate())
        .set("batch256_ratio", tb.rate() / ub.rate().max(1e-9))
        .set("churn_per_s", ch.rate())
        .set("churn_p50_us", q(&ch, 0.5))
        .set("churn_p99_us", q(&ch, 0.99));
    super::e2e::stop_daemon(daemon, "tcp-tls")?;
    Ok(vec![o])
}
