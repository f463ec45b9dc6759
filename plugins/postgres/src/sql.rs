//! The table name and the statements the sink runs.
//!
//! The table name is the only text from the config that ends up inside
//! SQL, so it is restricted to lowercase identifiers (optionally
//! schema-qualified) and double-quoted anyway: no injection, and the name
//! means the same quoted or not.

use std::fmt;

use spillway_json_columns::{Column, ColumnType};

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1), in bytes.
pub const IDENTIFIER_BYTES_MAX: usize = 63;

/// A checked `table` or `schema.table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    schema: Option<String>,
    table: String,
}

/// Checks one identifier: `[a-z_][a-z0-9_]*`, 1 to 63 bytes.
pub(crate) fn identifier(part: &str) -> Result<String, String> {
    let mut chars = part.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || part.len() > IDENTIFIER_BYTES_MAX {
        return Err(format!(
            "{part:?} is not a lowercase SQL identifier ([a-z_][a-z0-9_]*, at most \
             {IDENTIFIER_BYTES_MAX} bytes), optionally schema-qualified"
        ));
    }
    Ok(part.to_string())
}

impl TableName {
    /// `name` or `schema.name`.
    pub fn parse(text: &str) -> Result<TableName, String> {
        match text.split_once('.') {
            None => Ok(TableName {
                schema: None,
                table: identifier(text)?,
            }),
            Some((schema, table)) => Ok(TableName {
                schema: Some(identifier(schema)?),
                table: identifier(table)?,
            }),
        }
    }

    /// As it goes into SQL: `"name"` or `"schema"."name"`.
    pub fn quoted(&self) -> String {
        match &self.schema {
            None => format!("\"{}\"", self.table),
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            None => f.write_str(&self.table),
            Some(schema) => write!(f, "{schema}.{}", self.table),
        }
    }
}

/// A mapped column's SQL type.
pub fn sql_type(kind: ColumnType) -> &'static str {
    match kind {
        ColumnType::Text => "text",
        ColumnType::Bigint => "bigint",
        ColumnType::Double => "double precision",
        ColumnType::Boolean => "boolean",
        ColumnType::Timestamptz => "timestamptz",
        ColumnType::Json => "jsonb",
    }
}

/// The array type a mapped column's values are sent as, and the cast from
/// an element of it to the column's type (if any).
pub fn array_and_cast(kind: ColumnType) -> (&'static str, &'static str) {
    match kind {
        ColumnType::Text => ("text[]", ""),
        ColumnType::Bigint => ("bigint[]", ""),
        ColumnType::Double => ("float8[]", ""),
        ColumnType::Boolean => ("boolean[]", ""),
        ColumnType::Timestamptz => ("text[]", "::timestamptz"),
        ColumnType::Json => ("text[]", "::jsonb"),
    }
}

/// Creates the table if it does not exist (with the mapped `columns`).
pub fn create_table(table: &TableName, columns: &[Column]) -> String {
    let mut extra = String::new();
    for c in columns {
        let null = if c.required { " NOT NULL" } else { "" };
        extra.push_str(&format!("\"{}\" {}{null}, ", c.name, sql_type(c.kind)));
    }
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\
           instance text NOT NULL, \
           shard integer NOT NULL, \
           seq bigint NOT NULL, \
           tier smallint NOT NULL, \
           arrival_us bigint NOT NULL, \
           payload bytea NOT NULL, \
           {extra}\
           PRIMARY KEY (instance, shard, seq))",
        table.quoted()
    )
}

/// Whether the table exists: `$1` the table name as [`TableName`]
/// displays it; one row, NULL when it does not.
pub const TABLE_EXISTS: &str = "SELECT to_regclass($1)::text";

/// The unique indexes of a table (its primary key among them): `$1` as
/// above; one row per index: its name, whether it is the primary key, its
/// columns.
pub const UNIQUE_INDEXES: &str = "SELECT ic.relname::text, i.indisprimary, \
       array_agg(a.attname::text ORDER BY a.attnum) \
     FROM pg_index i \
     JOIN pg_class ic ON ic.oid = i.indexrelid \
     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
     WHERE i.indrelid = to_regclass($1) AND i.indisunique \
     GROUP BY ic.relname, i.indisprimary";

/// The key every row is written under: a record's identity across a fleet.
pub const KEY_COLUMNS: [&str; 3] = ["instance", "shard", "seq"];

/// What to run, once, to bring a table of the old shape (keyed by
/// `(shard, seq)`, from before the instance column) to this one. `legacy`
/// stands for the instance of the rows already there.
pub fn migration(table: &TableName, primary_key: &str) -> String {
    let t = table.quoted();
    format!(
        "ALTER TABLE {t} ADD COLUMN instance text NOT NULL DEFAULT 'legacy'; \
         ALTER TABLE {t} DROP CONSTRAINT \"{primary_key}\", ADD PRIMARY KEY (instance, shard, seq); \
         ALTER TABLE {t} ALTER COLUMN instance DROP DEFAULT;"
    )
}

/// The mapped columns' names, each after a comma.
fn column_list(columns: &[Column]) -> String {
    columns
        .iter()
        .map(|c| format!(", \"{}\"", c.name))
        .collect()
}

/// Inserts a whole batch of one shard in one statement: `$1` the
/// instance, `$2` the shard, `$3..$6` arrays of seq, tier, arrival_us,
/// payload, then one array per mapped column (one element per record).
/// Rows already there are skipped (redelivery).
pub fn insert_batch(table: &TableName, columns: &[Column]) -> String {
    let (mut arrays, mut names, mut select) = (String::new(), String::new(), String::new());
    for (i, c) in columns.iter().enumerate() {
        let (array, cast) = array_and_cast(c.kind);
        arrays.push_str(&format!(", ${}::{array}", 7 + i));
        names.push_str(&format!(", c{i}"));
        select.push_str(&format!(", r.c{i}{cast}"));
    }
    format!(
        "INSERT INTO {} (instance, shard, seq, tier, arrival_us, payload{}) \
         SELECT $1::text, $2::integer, r.seq, r.tier, r.arrival_us, r.payload{select} \
         FROM unnest($3::bigint[], $4::smallint[], $5::bigint[], $6::bytea[]{arrays}) \
           AS r(seq, tier, arrival_us, payload{names}) \
         ON CONFLICT (instance, shard, seq) DO NOTHING",
        table.quoted(),
        column_list(columns)
    )
}

/// Inserts one record (used to find the bad records of a batch).
pub fn insert_one(table: &TableName, columns: &[Column]) -> String {
    let mut values = String::new();
    for (i, c) in columns.iter().enumerate() {
        let (array, cast) = array_and_cast(c.kind);
        let scalar = array.trim_end_matches("[]");
        values.push_str(&format!(", ${}::{scalar}{cast}", 7 + i));
    }
    format!(
        "INSERT INTO {} (instance, shard, seq, tier, arrival_us, payload{}) \
         VALUES ($1::text, $2::integer, $3::bigint, $4::smallint, $5::bigint, $6::bytea{values}) \
         ON CONFLICT (instance, shard, seq) DO NOTHING",
        table.quoted(),
        column_list(columns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        assert_eq!(
            TableName::parse("spillway_records").unwrap().quoted(),
            "\"spillway_records\""
        );
        let t = TableName::parse("events.r2").unwrap();
        assert_eq!(
            (t.quoted().as_str(), t.to_string().as_str()),
            ("\"events\".\"r2\"", "events.r2")
        );
        assert!(TableName::parse(&"a".repeat(63)).is_ok());
        for bad in [
            "",
            "Records",
            "1abc",
            "a-b",
            "a.b.c",
            "a;drop table x",
            "\"a\"",
            ".a",
            "a.",
            &"a".repeat(64),
        ] {
            assert!(TableName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn statements_quote_the_table() {
        let t = TableName::parse("s.t").unwrap();
        assert!(create_table(&t, &[]).starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\" ("));
        assert!(insert_batch(&t, &[]).contains("ON CONFLICT (instance, shard, seq) DO NOTHING"));
        assert!(create_table(&t, &[]).contains("PRIMARY KEY (instance, shard, seq)"));
        assert!(migration(&t, "t_pkey").contains(
            "ALTER TABLE \"s\".\"t\" DROP CONSTRAINT \"t_pkey\", ADD PRIMARY KEY (instance, shard, seq)"
        ));
        assert!(insert_one(&t, &[]).starts_with("INSERT INTO \"s\".\"t\" "));
    }
}
