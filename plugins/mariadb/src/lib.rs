//! # spillway-plugin-mariadb: records into a MySQL / MariaDB table
//!
//! A sink plugin that writes each batch into one table, in one
//! transaction, idempotently: a record is one row keyed by its identity
//! `(instance, shard, seq)` (the daemon's instance id, kept in its data
//! folder, and the record's numbers there). The rows of a batch already
//! in the table (a redelivery after a crash or a retry) are found first
//! and skipped; the others go in with one multi-row `INSERT`. Never
//! `INSERT IGNORE`, which would also hide truncation and constraint
//! errors, and the session runs in strict mode.
//!
//! ```toml
//! [sink]
//! type = "plugin"
//! path = "/usr/lib/spillway/plugins/libspillway_plugin_mariadb.so"
//!
//! [sink.options]
//! url = "mysql://spillway@db.example/events"
//! password_env = "SPILLWAY_DB_PASSWORD"
//! table = "spillway_records"     # created if missing (create_table = true)
//! tls = true
//! ```
//!
//! The table:
//!
//! ```sql
//! CREATE TABLE spillway_records (
//!     instance   VARCHAR(64) CHARACTER SET ascii NOT NULL, -- the daemon's instance id
//!     shard      INT UNSIGNED     NOT NULL,  -- the shard that stored the record
//!     seq        BIGINT UNSIGNED  NOT NULL,  -- its sequence number there
//!     tier       TINYINT UNSIGNED NOT NULL,  -- 1 Sync, 2 Batched, 3 Buffered
//!     arrival_us BIGINT UNSIGNED  NOT NULL,  -- accepted at, µs since the Unix epoch
//!     payload    LONGBLOB         NOT NULL,
//!     PRIMARY KEY (instance, shard, seq)
//! ) ENGINE=InnoDB;
//! ```
//!
//! A table keyed otherwise is never written into: the start (when the
//! server answers), `spillway check`, the health check and every batch say
//! so, with the `ALTER TABLE` to run.
//!
//! What an error means ([`errors`]): a record's fault (too long, out of
//! range, a constraint) rejects: the batch is then written again row by
//! row, each in a savepoint, in one transaction, so the good rows commit
//! and only the bad ones go to the dead letters with the server's message.
//! Everything else (a lost connection, a deadlock, a lock wait timeout, a
//! missing table) retries and the records wait in spillway.
//!
//! The client is blackbeam's `mysql` crate: synchronous (as the sink API),
//! pure Rust, maintained, with prepared statements, Unix sockets and TLS
//! through rustls (no OpenSSL). It speaks to MySQL and MariaDB alike.
//!
//! Layout, as every sink: [`options`] (what the user writes), [`sql`] (the
//! statements and the table name), [`errors`] (what a failure means),
//! [`sink`] (the `Sink`), and this file, which exports it.

pub mod errors;
pub mod options;
pub mod sink;
pub mod sql;

pub use options::MariadbOptions;
pub use sink::MariadbSink;

sink_sdk::export_sink!(MariadbSink);
