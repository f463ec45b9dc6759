//! The sink tables as the configuration reference shows them: `type` and
//! the delivery keys every type has, then each type's own keys, from the
//! descriptions beside each type's defaults and ranges
//! (`DeliveryConfig::REFERENCE`, `HttpConfig::REFERENCE`, ...). The daemon
//! renders them into docs/sinks.md and `spillway.toml(5)`.

use std::sync::OnceLock;

use sink_sdk::keys::{Allowed, DefaultValue, Key, Table};

use crate::delivery::DeliveryConfig;
use crate::registry::SINK_TYPES;

/// `sink` (`type` and the delivery keys), then `sink.TYPE` for each type
/// that has keys of its own, in registry order.
pub fn reference_tables() -> Vec<Table> {
    static TABLES: OnceLock<Vec<Table>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
            let names: Vec<String> = SINK_TYPES
                .iter()
                .map(|t| format!("`\"{}\"`", t.name))
                .collect();
            let kinds: Vec<String> = SINK_TYPES
                .iter()
                .map(|t| format!("`\"{}\"`: {}", t.name, t.about))
                .collect();
            let type_key = Key {
                name: "sink.type",
                default: DefaultValue::Required,
                allowed: Allowed::Text(leak(names.join(", "))),
                also: "",
                meaning: leak(format!("Which sink. {}", kinds.join(" "))),
            };
            let mut delivery = vec![type_key];
            delivery.extend_from_slice(DeliveryConfig::REFERENCE);
            let mut tables = vec![Table {
                name: "sink",
                keys: Box::leak(delivery.into_boxed_slice()),
            }];
            for t in SINK_TYPES.iter().filter(|t| !t.reference.is_empty()) {
                tables.push(Table {
                    name: leak(format!("sink.{}", t.name)),
                    keys: t.reference,
                });
            }
            tables
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each type describes exactly the keys it reads, in the same order,
    /// and the delivery keys too.
    #[test]
    fn every_key_read_is_described_and_nothing_else() {
        for t in SINK_TYPES {
            let described: Vec<&str> = t.reference.iter().map(|k| k.short()).collect();
            assert_eq!(described, t.keys, "type {}", t.name);
            for key in t.reference {
                assert_eq!(key.name, format!("sink.{}.{}", t.name, key.short()));
            }
        }
        let described: Vec<&str> = DeliveryConfig::REFERENCE
            .iter()
            .map(|k| k.short())
            .collect();
        assert_eq!(described, DeliveryConfig::KEYS);
    }

    /// The integer defaults described are the defaults a table gets.
    #[test]
    fn the_delivery_defaults_described_are_the_defaults() {
        let d = DeliveryConfig::default();
        let int = |name: &str| {
            DeliveryConfig::REFERENCE
                .iter()
                .find(|k| k.short() == name)
                .unwrap()
                .int()
        };
        assert_eq!(int("max_records"), u64::from(d.max_records));
        assert_eq!(int("max_bytes"), d.max_bytes);
        assert_eq!(int("linger_ms"), d.linger_ms);
        assert_eq!(int("retry_initial_ms"), d.retry_initial_ms);
        assert_eq!(int("retry_max_ms"), d.retry_max_ms);
        assert_eq!(int("max_retry_duration_ms"), d.max_retry_duration_ms);
        assert_eq!(int("build_timeout_ms"), d.build_timeout_ms);
        assert_eq!(int("lag_bytes_max"), d.lag_bytes_max);
    }
}
