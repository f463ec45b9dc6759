//! The sink tables as the configuration reference shows them: `type` and
//! the delivery keys every type has, then each type's own keys, from the
//! descriptions beside each type's defaults and ranges
//! (`DeliveryConfig::REFERENCE`, `HttpConfig::REFERENCE`, ...). The daemon
//! renders them into docs/sinks.md and `spillway.toml(5)`.

use std::sync::OnceLock;

use sink_sdk::keys::{Allowed, DefaultValue, Key, Table};

use crate::keys::DeliveryConfig;
use crate::registry::SINK_TYPES;

/// `sink` (`type` and the delivery keys), then `sink.TYPE` for each type
/// that has keys of its own, in registry order.
pub fn reference_tables() -> Vec<Table> {
    static TABLES: OnceLock<Vec<Table>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
            let names: Vec<&'static str> = SINK_TYPES.iter().map(|t| t.name).collect();
            let kinds: Vec<String> = SINK_TYPES
                .iter()
                .map(|t| format!("`\"{}\"`: {}", t.name, t.about))
                .collect();
            let type_key = Key {
                name: "sink.type",
                default: DefaultValue::Required,
                allowed: Allowed::OneOf(Box::leak(names.into_boxed_slice())),
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

    /// Every key is named after its table, and no name is described
    /// twice: not within a type, and not as both a type's key and a
    /// delivery key (the table reader would give it to one of them only).
    /// That each described key is read is each type's own test (it sets
    /// them all).
    #[test]
    fn every_key_is_named_once_after_its_table() {
        let delivery: Vec<&str> = DeliveryConfig::keys().collect();
        for t in SINK_TYPES {
            let mut seen: Vec<&str> = Vec::new();
            for key in t.reference {
                assert_eq!(key.name, format!("sink.{}.{}", t.name, key.short()));
                assert!(
                    !seen.contains(&key.short()),
                    "{} twice in {}",
                    key.short(),
                    t.name
                );
                assert!(
                    !delivery.contains(&key.short()),
                    "{} is a delivery key",
                    key.name
                );
                seen.push(key.short());
            }
        }
        for (i, key) in DeliveryConfig::REFERENCE.iter().enumerate() {
            assert_eq!(key.name, format!("sink.{}", key.short()));
            assert!(!delivery[..i].contains(&key.short()), "{} twice", key.name);
        }
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
        assert_eq!(int("batch_records_max"), u64::from(d.batch_records_max));
        assert_eq!(int("batch_bytes_max"), d.batch_bytes_max);
        assert_eq!(int("linger_ms"), d.linger_ms);
        assert_eq!(int("retry_initial_ms"), d.retry_initial_ms);
        assert_eq!(int("retry_max_ms"), d.retry_max_ms);
        assert_eq!(int("retry_duration_max_ms"), d.retry_duration_max_ms);
        assert_eq!(int("build_timeout_ms"), d.build_timeout_ms);
        assert_eq!(int("lag_bytes_max"), d.lag_bytes_max);
    }
}
