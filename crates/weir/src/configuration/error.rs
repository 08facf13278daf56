//! What is wrong with a configuration: where the value came from, which key, and how to
//! fix it.

use std::path::PathBuf;

use super::Origin;

/// A configuration that cannot be used.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigurationError {
    /// The file cannot be read.
    #[error("cannot read the configuration file `{}`: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not valid YAML, or not a mapping of keys to values.
    #[error("{origin}: {reason}")]
    Syntax {
        /// Where.
        origin: Origin,
        /// What is wrong.
        reason: String,
    },
    /// A key Weir does not know.
    #[error("{origin}: unknown configuration key `{key}`{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownKey {
        /// The key.
        key: String,
        /// Where it was set.
        origin: Origin,
        /// The closest valid key, if one is close.
        suggestion: Option<String>,
    },
    /// A value that the key does not take.
    #[error("{origin}: `{key}: {value}` is invalid: {expected}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// Where it was set.
        origin: Origin,
        /// What the key takes.
        expected: String,
    },
    /// A `-D` argument or property line without `key=value` (or `key: value`).
    #[error("{origin}: `{text}` is not `key=value`")]
    NotAnAssignment {
        /// What was given.
        text: String,
        /// Where.
        origin: Origin,
    },
    /// Values that cannot go together.
    #[error("{0}")]
    Conflict(String),
}

/// Its `Debug` form is its message, so that `fn main() -> Result<(), ConfigurationError>` prints what
/// went wrong rather than the enum's fields.
impl std::fmt::Debug for ConfigurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
