//! A table of config keys declared once ([`key_table!`](crate::key_table)): each key is its
//! field's name and type and its [`Key`] (default, allowed values with the
//! unit, meaning), and the rest is made from that one declaration: the
//! struct's field with the meaning as its doc, `Default` (each field from
//! its key's default, [`KeyDefault`]), `KEYS` (what the docs tables, the
//! man page and the JSON Schema are rendered from) and `check_ranges` (every
//! integer key in the range it declares, the error naming the key and
//! saying the range with its unit, [`Key::check`]). How the table is read
//! (a serde derive, a hand-written reader) and what it checks across keys
//! stay with its crate. The daemon declares its keys with it, and so does
//! a plugin its options (`in "options"`, told to the daemon through
//! [`PluginSink::OPTIONS`](crate::PluginSink::OPTIONS)).

use std::path::PathBuf;

pub use crate::keys::{DefaultValue, Key};

/// A field's value from its key's declared default. A default of the wrong
/// shape for the field is a mistake in the declaration, caught by the
/// first test that builds the default table.
pub trait KeyDefault: Sized {
    fn key_default(key: &Key) -> Self;
}

impl KeyDefault for u64 {
    fn key_default(key: &Key) -> Self {
        key.int()
    }
}

impl KeyDefault for u32 {
    fn key_default(key: &Key) -> Self {
        u32::try_from(key.int()).unwrap_or_else(|_| panic!("{}: default past u32", key.name))
    }
}

impl KeyDefault for bool {
    fn key_default(key: &Key) -> Self {
        key.flag()
    }
}

/// A required string (or one unset by default) is empty until it is read:
/// the reader says a required key is missing (a plugin's options are
/// checked against their declaration by the daemon before `create`).
impl KeyDefault for String {
    fn key_default(key: &Key) -> Self {
        match key.default {
            DefaultValue::Required | DefaultValue::Unset(_) => String::new(),
            _ => key.text().to_string(),
        }
    }
}

impl KeyDefault for PathBuf {
    fn key_default(key: &Key) -> Self {
        PathBuf::from(String::key_default(key))
    }
}

/// An optional key is unset by default; its key's default says what unset
/// means (or what is used in its place).
impl<T> KeyDefault for Option<T> {
    fn key_default(_: &Key) -> Self {
        None
    }
}

/// A table of entries (`[sink.options.columns]`) unset by default is empty.
impl<K: Ord, V> KeyDefault for std::collections::BTreeMap<K, V> {
    fn key_default(_: &Key) -> Self {
        Self::new()
    }
}

/// A list unset by default is empty.
impl<T> KeyDefault for Vec<T> {
    fn key_default(_: &Key) -> Self {
        Vec::new()
    }
}

/// A field's value as a range check reads it, if it is an integer (set).
pub trait AsInt {
    fn as_int(&self) -> Option<u64>;
}

macro_rules! as_int {
    ($($t:ty),*) => {$(
        impl AsInt for $t {
            fn as_int(&self) -> Option<u64> {
                Some(u64::from(*self))
            }
        }
        impl AsInt for Option<$t> {
            fn as_int(&self) -> Option<u64> {
                self.map(u64::from)
            }
        }
    )*};
}
as_int!(u8, u16, u32, u64);

/// A field as the range check reads it: an integer field's value, or
/// nothing for a field of another type (picked by method resolution on
/// `&Probe`: [`IntKey`], on `Probe`, is found first where the field is an
/// integer ([`AsInt`]); else [`OtherKey`], on `&Probe`, one autoref later).
#[doc(hidden)]
pub struct Probe<'a, T>(pub &'a T);

#[doc(hidden)]
pub trait IntKey {
    fn int_value(&self) -> Option<u64>;
}

impl<T: AsInt> IntKey for Probe<'_, T> {
    fn int_value(&self) -> Option<u64> {
        self.0.as_int()
    }
}

#[doc(hidden)]
pub trait OtherKey {
    fn int_value(&self) -> Option<u64>;
}

impl<T> OtherKey for &Probe<'_, T> {
    fn int_value(&self) -> Option<u64> {
        None
    }
}

/// An integer key set outside the range it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    pub key: &'static Key,
    pub value: u64,
    /// What is allowed, as [`Key::check`] says it.
    pub allowed: String,
}

/// As the daemon says it: `options.rotate_bytes = 5 is out of range:
/// allowed 1048576..=68719476736 (1 MiB..=64 GiB)`.
impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} = {} is out of range: allowed {}",
            self.key.name, self.value, self.allowed
        )
    }
}

impl std::error::Error for OutOfRange {}

/// `value` of `key` against the range `key` declares.
pub fn in_range(key: &'static Key, value: u64) -> Result<(), OutOfRange> {
    key.check(value).map_err(|allowed| OutOfRange {
        key,
        value,
        allowed,
    })
}

/// Declares a table's keys once (see the module's doc). The attributes
/// are the struct's (derives, serde's); fields after `also` are not keys
/// (sub-tables), default-made.
///
/// ```
/// use sink_sdk::keys::{Allowed, Unit};
/// sink_sdk::key_table! {
///     /// `[demo]`.
///     #[derive(Debug, Clone, PartialEq)]
///     pub struct Demo in "demo" {
///         window_ms: u64 = Key {
///             default: DefaultValue::Int(250),
///             allowed: Allowed::Range { min: 10, max: 1000, unit: Unit::Ms },
///             also: "",
///             meaning: "How long the demo gathers records.",
///         },
///     }
/// }
/// assert_eq!(Demo::default().window_ms, 250);
/// assert_eq!(Demo::KEYS[0].name, "demo.window_ms");
/// let e = Demo { window_ms: 5 }.check_ranges().unwrap_err();
/// assert_eq!((e.key.name, e.allowed.as_str()), ("demo.window_ms", "10..=1000 ms"));
/// ```
#[macro_export]
macro_rules! key_table {
    (
        $(#[$attr:meta])*
        $vis:vis struct $Name:ident in $table:literal {
            $(
                $field:ident: $ty:ty = Key {
                    default: $default:expr,
                    allowed: $allowed:expr,
                    also: $also:literal,
                    meaning: $meaning:literal $(,)?
                }
            ),* $(,)?
        }
        $(
            also {
                $( $(#[$oattr:meta])* $ofield:ident: $oty:ty ),* $(,)?
            }
        )?
    ) => {
        $(#[$attr])*
        $vis struct $Name {
            $(
                #[doc = $meaning]
                pub $field: $ty,
            )*
            $($(
                $(#[$oattr])*
                pub $ofield: $oty,
            )*)?
        }

        impl $Name {
            /// Every key of this table, in the order the reference lists
            /// them.
            pub const KEYS: &'static [$crate::keys::Key] = &[$(
                $crate::keys::Key {
                    name: concat!($table, ".", stringify!($field)),
                    default: {
                        #[allow(unused_imports)]
                        use $crate::keys::DefaultValue;
                        $default
                    },
                    allowed: $allowed,
                    also: $also,
                    meaning: $meaning,
                },
            )*];

            /// The key `short` of this table (a name the table declares).
            pub fn key(short: &str) -> &'static $crate::keys::Key {
                Self::KEYS
                    .iter()
                    .find(|k| k.short() == short)
                    .unwrap_or_else(|| panic!("{short} is not a key of [{}]", $table))
            }

            /// Every integer key in the range it declares.
            pub fn check_ranges(&self) -> Result<(), $crate::declare::OutOfRange> {
                #[allow(unused_imports)]
                use $crate::declare::{IntKey as _, OtherKey as _};
                $(
                    if let Some(value) = (&$crate::declare::Probe(&self.$field)).int_value() {
                        $crate::declare::in_range(Self::key(stringify!($field)), value)?;
                    }
                )*
                Ok(())
            }
        }

        impl Default for $Name {
            fn default() -> Self {
                $Name {
                    $(
                        $field: $crate::declare::KeyDefault::key_default(
                            Self::key(stringify!($field)),
                        ),
                    )*
                    $($(
                        $ofield: Default::default(),
                    )*)?
                }
            }
        }
    };
}
