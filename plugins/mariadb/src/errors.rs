//! What a failure means: retry (the records wait in spillway) or reject
//! (the records' fault: they go to the dead letters with the server's
//! message).
//!
//! Only errors that are a record's fault reject: a value that does not fit
//! its column or type, a NULL, a duplicate in another unique index, a
//! foreign key or check constraint. Everything else (a lost or refused
//! connection, a deadlock, a lock wait timeout, too many connections, a
//! server shutting down, a missing table or column, no privilege, an error
//! this list does not know) retries: the records wait, nothing is lost.

/// What to do about an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Offer the batch again; `reconnect`: the session is no good.
    Retry { reason: String, reconnect: bool },
    /// The records' fault (find which ones).
    Reject { reason: String },
}

/// Server error codes that are a record's fault.
const RECORD_FAULTS: &[u16] = &[
    1048, // ER_BAD_NULL_ERROR: column cannot be null
    1062, // ER_DUP_ENTRY: a duplicate in another unique index
    1264, // ER_WARN_DATA_OUT_OF_RANGE
    1265, // WARN_DATA_TRUNCATED
    1292, // ER_TRUNCATED_WRONG_VALUE
    1366, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
    1406, // ER_DATA_TOO_LONG
    1451, // ER_ROW_IS_REFERENCED_2
    1452, // ER_NO_REFERENCED_ROW_2
    3140, // ER_INVALID_JSON_TEXT (MySQL)
    3819, // ER_CHECK_CONSTRAINT_VIOLATED (MySQL)
    4025, // ER_CONSTRAINT_FAILED (MariaDB: a CHECK constraint)
];

/// Server error codes after which the session is no good.
const SESSION_GONE: &[u16] = &[
    1040, // ER_CON_COUNT_ERROR: too many connections
    1053, // ER_SERVER_SHUTDOWN
    1927, // ER_CONNECTION_KILLED (MariaDB)
    2006, // CR_SERVER_GONE_ERROR
    2013, // CR_SERVER_LOST
];

/// The verdict on `error`.
pub fn verdict(error: &mysql::Error) -> Verdict {
    match error {
        mysql::Error::MySqlError(e) => {
            let reason = format!(
                "mysql: {} (error {}, SQLSTATE {})",
                e.message, e.code, e.state
            );
            if RECORD_FAULTS.contains(&e.code) {
                Verdict::Reject { reason }
            } else {
                Verdict::Retry {
                    reconnect: SESSION_GONE.contains(&e.code),
                    reason,
                }
            }
        }
        // I/O, protocol, TLS, a bad reply: the session is no good.
        other => Verdict::Retry {
            reason: format!("mysql: {other}"),
            reconnect: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: u16) -> mysql::Error {
        mysql::Error::MySqlError(mysql::MySqlError {
            state: "HY000".into(),
            message: "m".into(),
            code,
        })
    }

    #[test]
    fn records_faults_reject_and_the_rest_retry() {
        assert!(matches!(verdict(&server(1406)), Verdict::Reject { .. }));
        assert!(matches!(verdict(&server(4025)), Verdict::Reject { .. }));
        assert_eq!(
            verdict(&server(1213)),
            Verdict::Retry {
                reason: "mysql: m (error 1213, SQLSTATE HY000)".into(),
                reconnect: false
            }
        );
        assert!(matches!(
            verdict(&server(1146)),
            Verdict::Retry {
                reconnect: false,
                ..
            }
        ));
        assert!(matches!(
            verdict(&server(2013)),
            Verdict::Retry {
                reconnect: true,
                ..
            }
        ));
        let io = mysql::Error::IoError(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(
            verdict(&io),
            Verdict::Retry {
                reconnect: true,
                ..
            }
        ));
    }
}
