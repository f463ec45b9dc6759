//! A sink type's keys declared once ([`sink_keys!`]): each key is its
//! field's type and its [`Key`] (name, default, allowed values with the
//! unit, meaning), and everything else is made from that one declaration:
//! the struct's field (an `Option`, unset = the default) with the meaning
//! as its doc, the `REFERENCE` the docs, the man page and the JSON Schema
//! are rendered from, the `read_key` arm, the range check of every integer
//! key declared with a range, and `Debug` with a secret key's value
//! redacted. What a type checks across its keys (a URL, a rule between two
//! keys) stays in its own `check`, which calls `check_ranges` first.

use std::collections::BTreeMap;

#[doc(hidden)]
pub use sink_sdk::declare::{IntKey, OtherKey, Probe};
#[doc(hidden)]
pub use sink_sdk::keys::Key;
#[doc(hidden)]
pub use toml;

#[doc(hidden)]
pub use sink_sdk::declare::in_range;

/// How a secret key shows in `Debug`: a table by its keys, anything else
/// not at all.
pub trait Redact {
    fn redacted(&self) -> String;
}

impl Redact for toml::Table {
    fn redacted(&self) -> String {
        format!(
            "keys {:?}, values redacted",
            self.keys().collect::<Vec<_>>()
        )
    }
}

impl Redact for BTreeMap<String, String> {
    fn redacted(&self) -> String {
        format!(
            "keys {:?}, values redacted",
            self.keys().collect::<Vec<_>>()
        )
    }
}

impl Redact for String {
    fn redacted(&self) -> String {
        "redacted".into()
    }
}

/// The field of a secret key in `Debug`.
#[doc(hidden)]
pub fn debug_secret<T: Redact>(value: &Option<T>) -> Option<String> {
    value.as_ref().map(Redact::redacted)
}

/// Declares a sink type's keys once (see the module's doc):
///
/// ```text
/// sink_keys! {
///     /// The keys of `type = "file"`.
///     pub struct FileConfig in "sink.file" {
///         path: PathBuf = Key { default: ..., allowed: ..., also: "", meaning: "..." },
///         options: toml::Table = Key { ..., meaning: "...", secret: true, },
///     }
/// }
/// ```
#[macro_export]
macro_rules! sink_keys {
    (
        $(#[$attr:meta])*
        $vis:vis struct $Name:ident in $table:literal {
            $(
                $field:ident: $ty:ty = Key {
                    default: $default:expr,
                    allowed: $allowed:expr,
                    also: $also:literal,
                    meaning: $meaning:literal,
                    $(secret: $secret:tt,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, PartialEq, Default)]
        $vis struct $Name {
            $(
                #[doc = $meaning]
                pub $field: Option<$ty>,
            )*
        }

        impl $Name {
            /// Every key of this type, as the reference (docs,
            /// `spillway.toml(5)`, the JSON Schema) describes it.
            pub const REFERENCE: &'static [$crate::declare::Key] = &[$(
                $crate::declare::Key {
                    name: concat!($table, ".", stringify!($field)),
                    default: $default,
                    allowed: $allowed,
                    also: $also,
                    meaning: $meaning,
                },
            )*];

            /// Reads the value of `key`, one of [`Self::REFERENCE`].
            pub fn read_key(
                &mut self,
                key: &str,
                value: $crate::declare::toml::Value,
            ) -> Result<(), $crate::declare::toml::de::Error> {
                $(
                    if key == stringify!($field) {
                        self.$field = value.try_into()?;
                        return Ok(());
                    }
                )*
                unreachable!("{key} is not a key of {}", stringify!($Name))
            }

            /// Every integer key that is set, in the range it declares.
            pub fn check_ranges(&self) -> Result<(), $crate::KeyProblem> {
                #[allow(unused_imports)]
                use $crate::declare::{IntKey as _, OtherKey as _};
                $(
                    if let Some(value) = (&$crate::declare::Probe(&self.$field)).int_value() {
                        let key = Self::REFERENCE
                            .iter()
                            .find(|k| k.short() == stringify!($field))
                            .expect("every field is declared");
                        $crate::declare::in_range(key, value).map_err($crate::KeyProblem::from)?;
                    }
                )*
                Ok(())
            }
        }

        impl std::fmt::Debug for $Name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut out = f.debug_struct(stringify!($Name));
                $(
                    $crate::sink_keys!(@debug out, self, $field $(, $secret)?);
                )*
                out.finish()
            }
        }
    };
    (@debug $out:ident, $self:ident, $field:ident) => {
        $out.field(stringify!($field), &$self.$field);
    };
    (@debug $out:ident, $self:ident, $field:ident, true) => {
        $out.field(stringify!($field), &$crate::declare::debug_secret(&$self.$field));
    };
}
