//! # spillway-plugin-postgres: records into a PostgreSQL table
//!
//! A sink plugin that writes each batch into one table, in one
//! transaction, idempotently: a record is one row keyed by its identity
//! `(instance, shard, seq)` (the daemon's instance id, kept in its data
//! folder, and the record's numbers there), inserted with
//! `ON CONFLICT (instance, shard, seq) DO NOTHING`, so a batch delivered
//! again after a crash or a retry adds nothing twice, and a fleet of
//! daemons (each numbering from 0) shares one table without one daemon's
//! rows taking another's place.
//!
//! ```toml
//! [sink]
//! type = "plugin"
//! path = "target/release/libspillway_plugin_postgres.so"
//!
//! [sink.options]
//! conninfo = "host=/var/run/postgresql user=spillway dbname=events"
//! table = "spillway_records"     # created if missing (create_table = true)
//! ```
//!
//! The table:
//!
//! ```sql
//! CREATE TABLE spillway_records (
//!     instance   text     NOT NULL,  -- the daemon's instance id
//!     shard      integer  NOT NULL,  -- the shard that stored the record
//!     seq        bigint   NOT NULL,  -- its sequence number there
//!     tier       smallint NOT NULL,  -- 1 Sync, 2 Batched, 3 Buffered
//!     arrival_us bigint   NOT NULL,  -- accepted at, µs since the Unix epoch
//!     payload    bytea    NOT NULL,
//!     PRIMARY KEY (instance, shard, seq)
//! );
//! ```
//!
//! A table keyed otherwise (the `(shard, seq)` of earlier releases) is
//! never written into: the start (when the database answers), `spillway
//! check`, the health check and every batch say so, with the
//! `ALTER TABLE` that migrates it ([`sql::migration`]).
//!
//! What an error means ([`errors`]): a lost or refused connection, a
//! timeout, a serialization failure, a server short of resources or shutting
//! down (SQLSTATE classes 08, 40, 53, 57, and every error that is not the
//! records' fault) answers "retry" and the records wait in spillway. A data
//! or constraint error (classes 22, 23, 42) is the records' fault: the batch
//! is then written again row by row, each row in a savepoint, so the good
//! rows commit (still in one transaction) and only the bad ones are
//! rejected, to the dead-letter store with PostgreSQL's message.
//!
//! The connection is opened at the first batch (not when the daemon starts,
//! so a database outage does not stop spillway from accepting records),
//! and again, lazily, after it was lost. TLS is not supported (`NoTls`):
//! connect over a Unix socket or a trusted network.
//!
//! Layout, as every sink: [`options`] (what the user writes), [`sql`] (the
//! statements and the table name), [`errors`] (what a failure means),
//! [`sink`] (the `Sink`), and this file, which exports it.

pub mod errors;
pub mod options;
pub mod sink;
pub mod sql;

pub use options::PostgresOptions;
pub use sink::PostgresSink;

sink_sdk::export_sink!(PostgresSink);
