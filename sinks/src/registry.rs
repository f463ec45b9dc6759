//! The sink types spillway knows: one line each in [`SINK_TYPES`].
//!
//! A sink type is described by its folder, in one place (a `TYPE` static
//! beside the sink): its name (the value of `type`), its keys, and the two
//! traits that take a table from text to a running sink. [`TypeKeys`] is
//! the type's keys as the user wrote them: it reads each key's value and
//! checks them all, once, into a [`CheckedSink`]. A [`CheckedSink`] builds
//! the [`SinkFactory`] the drains use and answers `spillway check`'s
//! preflight.
//!
//! The traits live in [`crate::sink_type`], which the sink folders use, so
//! the arrows run one way: registry → folders → sink_type.
//!
//! Nothing outside this list names a sink type: `config.rs` reads a table
//! by looking `type` up here, and `build` and `preflight` call the checked
//! settings. Adding a sink is its folder plus one line below.

use std::sync::OnceLock;

pub use crate::sink_type::{CheckedSink, KeysValue, SinkType, TypeKeys};

/// Every sink type, in the order errors and `expected one of` list them.
pub static SINK_TYPES: &[&SinkType] = &[
    &crate::http::TYPE,
    &crate::file::TYPE,
    &crate::nats::TYPE,
    &crate::kafka::TYPE,
    &crate::noop::TYPE,
    &crate::plugin::TYPE,
];

/// The registered type called `name`.
pub fn find(name: &str) -> Option<&'static SinkType> {
    SINK_TYPES.iter().copied().find(|t| t.name == name)
}

/// Every type's name, as `type`'s "expected one of" lists them.
pub fn names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| SINK_TYPES.iter().map(|t| t.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_each_type_reads_its_own_keys() {
        for (i, t) in SINK_TYPES.iter().enumerate() {
            assert_eq!(names().iter().filter(|n| **n == t.name).count(), 1);
            assert_eq!(names()[i], t.name);
            assert_eq!((t.unset)().sink_type(), *t, "{t}'s keys name another type");
            assert_eq!(find(t.name), Some(*t));
        }
        assert_eq!(find("kinesis"), None);
    }
}
