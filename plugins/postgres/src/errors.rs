//! What a PostgreSQL error means for the records: wait and retry, or
//! reject (dead-letter) them.
//!
//! The rule is "only the records' own fault rejects them": a record is
//! dead-lettered only for a data exception (SQLSTATE class 22), an
//! integrity constraint violation (23), or another class 42 error (syntax
//! or access rule) raised while writing it. Everything else waits: a lost,
//! refused or timed-out connection (no SQLSTATE, or class 08), a
//! serialization failure or deadlock (40), insufficient resources (53), an
//! operator intervention such as a shutdown or a statement timeout (57),
//! a lock not available (55), a system error (58, XX), and any class not
//! listed.
//!
//! Three class 42 errors are not the records' fault but the table's, and
//! would dead-letter every record until someone fixes it, so they wait
//! too: undefined table (42P01: it was dropped; it is re-created when
//! `create_table` is on), undefined column (42703: the table has other
//! columns) and insufficient privilege (42501).

use postgres::error::SqlState;

/// What to do about a failed statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Transient: answer retry. `reconnect` when the session is unusable.
    Retry { reason: String, reconnect: bool },
    /// The records' fault: reject them (per record, when isolating).
    Reject { reason: String },
}

/// How a SQLSTATE class is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Wait and try again (the records are fine).
    Transient,
    /// The table is missing or not the expected one: wait, and re-create
    /// it if allowed.
    TableProblem,
    /// The records' fault.
    Data,
}

/// The class of a SQLSTATE code (five characters).
pub fn class_of(code: &str) -> Class {
    match code {
        "42P01" | "42703" | "42501" => Class::TableProblem,
        _ => match code.get(..2) {
            Some("22" | "23" | "42") => Class::Data,
            _ => Class::Transient,
        },
    }
}

/// `error` and its causes, e.g. `error connecting to server: Connection
/// refused (os error 111)` (its own text leaves the cause out).
pub fn describe(error: &postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(&format!(": {cause_text}"));
        }
        source = cause.source();
    }
    text
}

/// The verdict on `error`, with a reason for logs and dead letters.
pub fn verdict(error: &postgres::Error) -> Verdict {
    let Some(db) = error.as_db_error() else {
        // No SQLSTATE: I/O error, connection closed, timeout, protocol.
        return Verdict::Retry {
            reason: format!("postgres: {}", describe(error)),
            reconnect: true,
        };
    };
    let code = db.code().code();
    let mut reason = format!("postgres: {} (SQLSTATE {code})", db.message());
    if let Some(detail) = db.detail() {
        reason.push_str(&format!(": {detail}"));
    }
    match class_of(code) {
        Class::Data => Verdict::Reject { reason },
        Class::TableProblem => Verdict::Retry {
            reason,
            reconnect: true,
        },
        Class::Transient => Verdict::Retry {
            // A broken session, an admin shutdown: start a new one.
            reconnect: error.is_closed()
                || code.starts_with("08")
                || code.starts_with("57P")
                || *db.code() == SqlState::IN_FAILED_SQL_TRANSACTION,
            reason,
        },
    }
}

/// Whether creating the table failed only because another session created
/// it at the same moment (CREATE TABLE IF NOT EXISTS races on the catalog).
pub fn is_concurrent_create(error: &postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        for transient in [
            "08006", "08001", "40001", "40P01", "53100", "53300", "57014", "57P01", "55P03",
            "58030", "XX000", "0A000", "25P02", "28P01", "3D000",
        ] {
            assert_eq!(class_of(transient), Class::Transient, "{transient}");
        }
        for data in [
            "22001", "22P02", "22021", "23505", "23514", "23502", "42804", "42601",
        ] {
            assert_eq!(class_of(data), Class::Data, "{data}");
        }
        for table in ["42P01", "42703", "42501"] {
            assert_eq!(class_of(table), Class::TableProblem, "{table}");
        }
    }
}
