//! Reading and checking the delivery keys every sink table has
//! ([`DeliveryConfig`], declared in sink-sdk with the drain that runs on
//! them), and the range checks every type's keys use. The sink folders use
//! this and nothing else of the table's reading, so they do not depend on
//! `config` (which depends on the registry, which depends on them).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
pub use sink_sdk::delivery::*;

pub use crate::error::KeyProblem;
pub(crate) use sink_sdk::units::{GIB, MIB};

/// A string key's value, one of `names` (serde's "unknown variant" error
/// otherwise, which lists them).
fn named<'de, A: MapAccess<'de>, T: FromStr>(
    map: &mut A,
    names: &'static [&'static str],
) -> Result<T, A::Error> {
    let value: String = map.next_value()?;
    value
        .parse()
        .map_err(|_| de::Error::unknown_variant(&value, names))
}

/// `batches_in_flight` as written: an integer or the string `"adaptive"`
/// (whose `max` is `batches_in_flight_max`'s, filled in by
/// [`DeliveryConfig::in_flight`]); the range is the check's.
struct InFlightValue(InFlight);

impl<'de> Deserialize<'de> for InFlightValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InFlightVisitor;

        impl Visitor<'_> for InFlightVisitor {
            type Value = InFlightValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer 1..=64 or the string \"adaptive\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<InFlightValue, E> {
                u32::try_from(v)
                    .map(|n| InFlightValue(InFlight::Fixed(n)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<InFlightValue, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<InFlightValue, E> {
                match v {
                    "adaptive" => Ok(InFlightValue(InFlight::Adaptive {
                        max: DEFAULT_BATCHES_IN_FLIGHT_MAX,
                    })),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }

        deserializer.deserialize_any(InFlightVisitor)
    }
}

/// Reads the value of `key`, one of [`DeliveryConfig::REFERENCE`], into
/// `d`.
pub(crate) fn read_key<'de, A: MapAccess<'de>>(
    d: &mut DeliveryConfig,
    key: &str,
    map: &mut A,
) -> Result<(), A::Error> {
    match key {
        "batch_records_max" => d.batch_records_max = map.next_value()?,
        "batch_bytes_max" => d.batch_bytes_max = map.next_value()?,
        "linger_ms" => d.linger_ms = map.next_value()?,
        "retry_initial_ms" => d.retry_initial_ms = map.next_value()?,
        "retry_max_ms" => d.retry_max_ms = map.next_value()?,
        "retry_duration_max_ms" => d.retry_duration_max_ms = map.next_value()?,
        "build_timeout_ms" => d.build_timeout_ms = map.next_value()?,
        "start" => d.start = named(map, StartAt::NAMES)?,
        "lag_bytes_max" => d.lag_bytes_max = map.next_value()?,
        "on_lag" => d.on_lag = named(map, OnLag::NAMES)?,
        "batches_in_flight" => d.batches_in_flight = map.next_value::<InFlightValue>()?.0,
        "batches_in_flight_max" => d.batches_in_flight_max = map.next_value()?,
        "checkpoint_interval_ms" => d.checkpoint_interval_ms = map.next_value()?,
        other => unreachable!("{other} is not a delivery key"),
    }
    Ok(())
}

/// Every delivery key in its range, and the rules across them.
pub(crate) fn check(d: &DeliveryConfig) -> Result<(), KeyProblem> {
    d.check_ranges().map_err(KeyProblem::from)?;
    if d.retry_max_ms < d.retry_initial_ms {
        return Err(KeyProblem::AgainstKey {
            key: "retry_max_ms".into(),
            head: format!(": {} is less than ", d.retry_max_ms),
            other: "retry_initial_ms",
            tail: format!(" = {}; it must be at least that", d.retry_initial_ms),
        });
    }
    if d.on_lag == OnLag::Skip && d.lag_bytes_max == 0 {
        return Err(KeyProblem::AgainstKey {
            key: "on_lag".into(),
            head: " = \"skip\" needs ".into(),
            other: "lag_bytes_max",
            tail: " (the lag to skip at); it is 0, no limit".into(),
        });
    }
    if let (InFlight::Fixed(n), Some(_)) = (d.batches_in_flight, d.batches_in_flight_max) {
        return Err(KeyProblem::AgainstKey {
            key: "batches_in_flight_max".into(),
            head: " is not used with ".into(),
            other: "batches_in_flight",
            tail: format!(" = {n} (only with \"adaptive\")"),
        });
    }
    Ok(())
}

/// `path`, required for `kind` and naming a file (`what` says which kind of
/// file, for the error). The file and plugin types share this key.
pub(crate) fn required_path<'a>(
    path: &'a Option<PathBuf>,
    kind: &'static str,
    what: &str,
) -> Result<&'a PathBuf, KeyProblem> {
    let Some(path) = path else {
        return Err(KeyProblem::Missing { key: "path", kind });
    };
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(KeyProblem::Invalid {
            key: "path".into(),
            reason: format!("{path:?} does not name {what}"),
        });
    }
    Ok(path)
}

/// Whether the environment can hold a variable of this name: not empty,
/// no `=`, no NUL. The daemon's own `token_env` keys use it too.
pub fn is_env_var_name(name: &str) -> bool {
    !(name.is_empty() || name.contains('=') || name.contains('\0'))
}

/// A key naming an environment variable: a name the environment can hold
/// (not empty, no `=`, no NUL).
pub(crate) fn check_env_var_name(key: &str, name: &str) -> Result<(), KeyProblem> {
    if !is_env_var_name(name) {
        return Err(KeyProblem::Invalid {
            key: key.into(),
            reason: format!("{name:?} is not an environment variable name"),
        });
    }
    Ok(())
}
