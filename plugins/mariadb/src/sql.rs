//! The table name and the statements the sink runs.
//!
//! The table name is the only text from the config that ends up inside
//! SQL, so it is restricted to lowercase identifiers (optionally
//! `database.table`) and backquoted anyway: no injection.

pub use spillway_sql_common::TableName;
use spillway_sql_common::{Column, ColumnType, Dialect};

/// MySQL's and MariaDB's identifiers: at most 64 bytes, quoted with
/// backquotes, qualified by a database.
pub static DIALECT: Dialect = Dialect {
    identifier_bytes_max: 64,
    quote: '`',
    qualifier: "database",
};

/// The key every row is written under: a record's identity across a fleet.
pub const KEY_COLUMNS: [&str; 3] = ["instance", "shard", "seq"];

/// A checked `table` or `database.table`.
pub fn table_name(text: &str) -> Result<TableName, String> {
    TableName::parse(text, &DIALECT)
}

/// Checks one identifier (a mapped column's name).
pub(crate) fn identifier(part: &str) -> Result<String, String> {
    DIALECT.identifier(part)
}

/// A mapped column's SQL type (`timestamptz` is stored in UTC).
pub fn sql_type(kind: ColumnType) -> &'static str {
    match kind {
        ColumnType::Text => "TEXT",
        ColumnType::Bigint => "BIGINT",
        ColumnType::Double => "DOUBLE",
        ColumnType::Boolean => "BOOLEAN",
        ColumnType::Timestamptz => "DATETIME(6)",
        ColumnType::Json => "JSON",
    }
}

/// Creates the table if it does not exist (with the mapped `columns`).
pub fn create_table(table: &TableName, columns: &[Column]) -> String {
    let mut extra = String::new();
    for c in columns {
        let null = if c.required { " NOT NULL" } else { "" };
        extra.push_str(&format!("`{}` {}{null}, ", c.name, sql_type(c.kind)));
    }
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\
           instance VARCHAR(64) CHARACTER SET ascii NOT NULL, \
           shard INT UNSIGNED NOT NULL, \
           seq BIGINT UNSIGNED NOT NULL, \
           tier TINYINT UNSIGNED NOT NULL, \
           arrival_us BIGINT UNSIGNED NOT NULL, \
           payload LONGBLOB NOT NULL, \
           {extra}\
           PRIMARY KEY (instance, shard, seq)) ENGINE=InnoDB",
        table.quoted()
    )
}

/// Whether the table exists: `?` the database (NULL: the connection's),
/// `?` the table. One row when it does.
pub const TABLE_EXISTS: &str = "SELECT 1 FROM information_schema.TABLES \
     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?";

/// The columns of the table's unique indexes (its primary key among
/// them), in index order: `(index name, column name)` rows; parameters as
/// above.
pub const UNIQUE_INDEX_COLUMNS: &str = "SELECT INDEX_NAME, COLUMN_NAME \
     FROM information_schema.STATISTICS \
     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
     ORDER BY INDEX_NAME, SEQ_IN_INDEX";

/// The seqs of one shard of one instance already in the table between
/// `?` and `?` (a redelivered batch's rows are skipped, not inserted
/// again; never `INSERT IGNORE`, which also hides truncation and
/// constraint errors).
pub fn existing(table: &TableName) -> String {
    format!(
        "SELECT seq FROM {} WHERE instance = ? AND shard = ? AND seq BETWEEN ? AND ?",
        table.quoted()
    )
}

/// Placeholders a row takes: the six columns every row has and one per
/// mapped column.
pub fn row_params(columns: &[Column]) -> usize {
    6 + columns.len()
}

/// One multi-row insert of `rows` rows ([`row_params`] placeholders each).
pub fn insert(table: &TableName, columns: &[Column], rows: usize) -> String {
    let names: String = columns.iter().map(|c| format!(", `{}`", c.name)).collect();
    let one = format!("({})", vec!["?"; row_params(columns)].join(","));
    let mut sql = format!(
        "INSERT INTO {} (instance, shard, seq, tier, arrival_us, payload{names}) VALUES ",
        table.quoted()
    );
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&one);
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        let t = table_name("events.r2").unwrap();
        assert_eq!(
            (t.quoted().as_str(), t.to_string().as_str()),
            ("`events`.`r2`", "events.r2")
        );
        assert!(table_name(&"a".repeat(64)).is_ok());
        for bad in ["Records", "a`b", "a.b.c", &"a".repeat(65)] {
            assert!(table_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn statements() {
        let t = table_name("t").unwrap();
        assert!(create_table(&t, &[]).contains("PRIMARY KEY (instance, shard, seq)"));
        assert_eq!(
            insert(&t, &[], 2),
            "INSERT INTO `t` (instance, shard, seq, tier, arrival_us, payload) VALUES \
             (?,?,?,?,?,?),(?,?,?,?,?,?)"
        );
    }
}
