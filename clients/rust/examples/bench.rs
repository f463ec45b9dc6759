//! The producer clients' common bench (docs/clients.md), for the Rust
//! client: with `SPILLWAY_SOCKET` set to a running daemon's socket, pushes
//! 5-byte records and prints one line per scenario, as every client in
//! `clients/` does:
//!
//! ```sh
//! SPILLWAY_SOCKET=spillway-data/spillway.sock cargo run --release -p spillway-client --example bench
//! ```

use std::time::Instant;

use spillway_client::{Client, Error, Reply, Tier};

const RECORD: &[u8] = b"hello";

fn report(scenario: &str, records: u64, started: Instant) {
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "client=rust scenario={scenario} records={records} seconds={seconds:.3} records_per_s={:.0}",
        records as f64 / seconds
    );
}

fn serial_sync(client: &mut Client, n: u64) -> Result<(), Error> {
    let started = Instant::now();
    for _ in 0..n {
        client.push(Tier::Sync, RECORD)?;
    }
    report("serial_sync", n, started);
    Ok(())
}

fn pipelined_sync(client: &mut Client, n: u64, window: usize) -> Result<(), Error> {
    let started = Instant::now();
    let mut pipeline = client.pipeline(window);
    for _ in 0..n {
        pipeline.push(Tier::Sync, RECORD)?;
    }
    while pipeline.outstanding() > 0 {
        pipeline.recv()?;
    }
    drop(pipeline);
    report("pipelined_sync_w64", n, started);
    Ok(())
}

fn batch_buffered(client: &mut Client, n: u64, batch: usize, window: usize) -> Result<(), Error> {
    let records = vec![RECORD; batch];
    let started = Instant::now();
    let mut pipeline = client.pipeline(window);
    let mut sent = 0u64;
    let mut acked = 0u64;
    while sent < n {
        let take = batch.min((n - sent) as usize);
        pipeline.push_batch(Tier::Buffered, &records[..take])?;
        sent += take as u64;
    }
    while pipeline.outstanding() > 0 {
        if let Reply::AckBatch(count) = pipeline.recv()? {
            acked += u64::from(count);
        }
    }
    drop(pipeline);
    assert_eq!(acked, n, "every record acked");
    report("batch256_buffered", n, started);
    Ok(())
}

fn main() -> Result<(), Error> {
    let socket = std::env::var("SPILLWAY_SOCKET")
        .expect("set SPILLWAY_SOCKET to a running daemon's producer socket");
    let mut client = Client::connect(&socket)?;
    serial_sync(&mut client, 2_000)?;
    pipelined_sync(&mut client, 50_000, 64)?;
    batch_buffered(&mut client, 2_000_000, 256, 8)?;
    Ok(())
}
