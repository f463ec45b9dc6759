//! A table name from the config: the only text from it that ends up inside
//! SQL, so it is restricted to lowercase identifiers (optionally qualified
//! by a schema or database) and quoted anyway: no injection, and the name
//! means the same quoted or not.

use std::fmt;

/// A server's rules for identifiers.
#[derive(Debug)]
pub struct Dialect {
    /// Longest identifier the server keeps, in bytes.
    pub identifier_bytes_max: usize,
    /// What an identifier is quoted with.
    pub quote: char,
    /// What qualifies a table: `schema` or `database` (for messages).
    pub qualifier: &'static str,
}

impl Dialect {
    /// Checks one identifier: `[a-z_][a-z0-9_]*`, 1 to
    /// `identifier_bytes_max` bytes.
    pub fn identifier(&self, part: &str) -> Result<String, String> {
        let mut chars = part.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !first_ok || !rest_ok || part.len() > self.identifier_bytes_max {
            return Err(format!(
                "{part:?} is not a lowercase SQL identifier ([a-z_][a-z0-9_]*, at most {} \
                 bytes), optionally {}-qualified",
                self.identifier_bytes_max, self.qualifier
            ));
        }
        Ok(part.to_string())
    }

    /// `part` quoted.
    pub fn quote(&self, part: &str) -> String {
        format!("{q}{part}{q}", q = self.quote)
    }
}

/// A checked `table` or `qualifier.table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    qualifier: Option<String>,
    table: String,
    dialect: &'static Dialect,
}

impl PartialEq for Dialect {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Dialect {}

impl TableName {
    /// `name` or `qualifier.name`, by `dialect`'s rules.
    pub fn parse(text: &str, dialect: &'static Dialect) -> Result<TableName, String> {
        let (qualifier, table) = match text.split_once('.') {
            None => (None, dialect.identifier(text)?),
            Some((q, t)) => (Some(dialect.identifier(q)?), dialect.identifier(t)?),
        };
        Ok(TableName {
            qualifier,
            table,
            dialect,
        })
    }

    /// As it goes into SQL: the name quoted, qualified if it was.
    pub fn quoted(&self) -> String {
        let d = self.dialect;
        match &self.qualifier {
            None => d.quote(&self.table),
            Some(q) => format!("{}.{}", d.quote(q), d.quote(&self.table)),
        }
    }

    /// The schema or database named, if any.
    pub fn qualifier(&self) -> Option<&str> {
        self.qualifier.as_deref()
    }

    /// The table's own name.
    pub fn table(&self) -> &str {
        &self.table
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.qualifier {
            None => f.write_str(&self.table),
            Some(q) => write!(f, "{q}.{}", self.table),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PG: Dialect = Dialect {
        identifier_bytes_max: 63,
        quote: '"',
        qualifier: "schema",
    };

    #[test]
    fn names_are_checked_and_quoted() {
        let t = TableName::parse("events.r2", &PG).unwrap();
        assert_eq!(
            (t.quoted().as_str(), t.to_string().as_str()),
            ("\"events\".\"r2\"", "events.r2")
        );
        assert_eq!(TableName::parse("t", &PG).unwrap().qualifier(), None);
        assert!(TableName::parse(&"a".repeat(63), &PG).is_ok());
        for bad in [
            "",
            "Records",
            "1abc",
            "a-b",
            "a.b.c",
            "a;drop",
            "\"a\"",
            ".a",
            "a.",
            &"a".repeat(64),
        ] {
            assert!(TableName::parse(bad, &PG).is_err(), "{bad:?}");
        }
    }
}
