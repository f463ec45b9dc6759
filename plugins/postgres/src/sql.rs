//! The table name and the statements the sink runs.
//!
//! The table name is the only text from the config that ends up inside
//! SQL, so it is restricted to lowercase identifiers (optionally
//! schema-qualified) and double-quoted anyway: no injection, and the name
//! means the same quoted or not.

pub use spillway_sql_common::TableName;
use spillway_sql_common::{Column, ColumnType, Dialect};

/// PostgreSQL's identifiers: at most 63 bytes (NAMEDATALEN - 1), quoted
/// with `"`, qualified by a schema.
pub static DIALECT: Dialect = Dialect {
    identifier_bytes_max: 63,
    quote: '"',
    qualifier: "schema",
};

/// A checked `table` or `schema.table`.
pub fn table_name(text: &str) -> Result<TableName, String> {
    TableName::parse(text, &DIALECT)
}

/// Checks one identifier (a mapped column's name).
pub(crate) fn identifier(part: &str) -> Result<String, String> {
    DIALECT.identifier(part)
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
    fn statements_quote_the_table() {
        let t = table_name("s.t").unwrap();
        assert!(create_table(&t, &[]).starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\" ("));
        assert!(insert_batch(&t, &[]).contains("ON CONFLICT (instance, shard, seq) DO NOTHING"));
        assert!(create_table(&t, &[]).contains("PRIMARY KEY (instance, shard, seq)"));
        assert!(migration(&t, "t_pkey").contains(
            "ALTER TABLE \"s\".\"t\" DROP CONSTRAINT \"t_pkey\", ADD PRIMARY KEY (instance, shard, seq)"
        ));
        assert!(insert_one(&t, &[]).starts_with("INSERT INTO \"s\".\"t\" "));
    }
}
