//! A job's configuration as Flink users write it: a `weir.yaml` with Flink's keys
//! (`parallelism.default`, `execution.checkpointing.interval`, `state.checkpoints.dir`,
//! `restart-strategy.type`, `rest.port`, …), overridden by environment variables
//! (`WEIR_EXECUTION_CHECKPOINTING_INTERVAL`, or `WEIR_PROPERTIES` holding `key: value`
//! lines, as Flink's `FLINK_PROPERTIES`), overridden in turn by `-D key=value` on the
//! command line. Every value remembers where it was set, so that an unknown key or a bad
//! value is reported with its file and line (and the closest valid key).
//!
//! ```
//! use std::time::Duration;
//! use weir::configuration::Configuration;
//! use weir::ExecutionConfig;
//!
//! let mut configuration = Configuration::from_yaml_str(
//!     "parallelism.default: 4\nexecution:\n  checkpointing:\n    interval: 10 s\n",
//!     "weir.yaml",
//! )?;
//! configuration.set_dynamic("restart-strategy.type=none")?;
//! let mut config = ExecutionConfig::default();
//! configuration.apply(&mut config)?;
//! assert_eq!(config.parallelism, 4);
//! assert_eq!(config.checkpoint.interval, Some(Duration::from_secs(10)));
//!
//! let typo = Configuration::from_yaml_str("execution.checkpointing.intreval: 1 s\n", "weir.yaml")?;
//! assert_eq!(
//!     typo.validate().unwrap_err().to_string(),
//!     "weir.yaml:1: unknown configuration key `execution.checkpointing.intreval`; did you mean `execution.checkpointing.interval`?"
//! );
//! # Ok::<(), weir::configuration::ConfigurationError>(())
//! ```

mod apply;
mod duration;
mod error;
mod memory_size;
pub mod options;
mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use duration::parse_duration;
pub use error::ConfigurationError;
pub use memory_size::parse_memory_size;
pub use options::{ConfigOption, OptionKind, OPTIONS};

/// The file name Weir looks for.
pub const FILE_NAME: &str = "weir.yaml";

/// Where a value was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A line of a configuration file.
    File {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
    },
    /// An environment variable.
    Environment(String),
    /// A `-D key=value` argument.
    CommandLine,
    /// Set by the program.
    Code,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Environment(var) => write!(f, "environment variable {var}"),
            Origin::CommandLine => write!(f, "-D on the command line"),
            Origin::Code => write!(f, "the program"),
        }
    }
}

/// One value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValue {
    /// The value as written.
    pub value: String,
    /// Where.
    pub origin: Origin,
}

/// Configuration keys and values, each with its origin (Flink's `Configuration`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Configuration {
    values: BTreeMap<String, ConfigValue>,
}

impl Configuration {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// The configuration in the YAML file `path`.
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<Self, ConfigurationError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigurationError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::from_yaml_str(&text, path)
    }

    /// The configuration in YAML `text`, read from `file` (named in errors).
    pub fn from_yaml_str(text: &str, file: impl AsRef<Path>) -> Result<Self, ConfigurationError> {
        let file = file.as_ref();
        let mut configuration = Self::new();
        for entry in yaml::read_entries(text, file)? {
            configuration.set(
                entry.key,
                entry.value,
                Origin::File {
                    path: file.to_path_buf(),
                    line: entry.line,
                },
            );
        }
        Ok(configuration)
    }

    /// The configuration a job process starts from: the file `file` if given (it must
    /// exist), else `$WEIR_CONF_DIR/weir.yaml` or `./weir.yaml` if one exists; then the
    /// environment's overrides. Nothing is checked yet: see [`validate`](Self::validate).
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigurationError> {
        let found = match file {
            Some(file) => Some(file.to_path_buf()),
            None => std::env::var_os("WEIR_CONF_DIR")
                .map(|dir| PathBuf::from(dir).join(FILE_NAME))
                .filter(|p| p.exists())
                .or_else(|| Some(PathBuf::from(FILE_NAME)).filter(|p| p.exists())),
        };
        let configuration = match found {
            Some(path) => Self::from_yaml_file(path)?,
            None => Self::new(),
        };
        configuration.with_environment(std::env::vars())
    }

    /// This configuration overridden by `vars`: `WEIR_PROPERTIES` (lines of `key: value`),
    /// then one variable per known key (`WEIR_REST_PORT` sets `rest.port`).
    pub fn with_environment(
        mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigurationError> {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        if let Some(properties) = vars.get("WEIR_PROPERTIES") {
            for line in properties
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
            {
                let (key, value) =
                    split_assignment(line).ok_or_else(|| ConfigurationError::NotAnAssignment {
                        text: line.to_string(),
                        origin: Origin::Environment("WEIR_PROPERTIES".into()),
                    })?;
                self.set(key, value, Origin::Environment("WEIR_PROPERTIES".into()));
            }
        }
        for option in OPTIONS {
            let var = options::environment_variable(option.key);
            if let Some(value) = vars.get(&var) {
                self.set(option.key, value.clone(), Origin::Environment(var));
            }
        }
        Ok(self)
    }

    /// Sets `key` to `value`, set at `origin`; a later set wins.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>, origin: Origin) {
        self.values.insert(
            key.into(),
            ConfigValue {
                value: value.into(),
                origin,
            },
        );
    }

    /// Applies a `-D key=value` argument.
    pub fn set_dynamic(&mut self, assignment: &str) -> Result<(), ConfigurationError> {
        let (key, value) =
            split_assignment(assignment).ok_or_else(|| ConfigurationError::NotAnAssignment {
                text: assignment.to_string(),
                origin: Origin::CommandLine,
            })?;
        self.set(key, value, Origin::CommandLine);
        Ok(())
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&ConfigValue> {
        self.values.get(key)
    }

    /// Every key set, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &ConfigValue)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Checks that every key is known and every value is of its key's kind.
    pub fn validate(&self) -> Result<(), ConfigurationError> {
        for (key, value) in &self.values {
            let Some(option) = options::find(key) else {
                return Err(ConfigurationError::UnknownKey {
                    key: key.clone(),
                    origin: value.origin.clone(),
                    suggestion: options::closest(key).map(str::to_string),
                });
            };
            check_kind(key, value, option.kind)?;
        }
        Ok(())
    }

    fn invalid(&self, key: &str, expected: impl Into<String>) -> ConfigurationError {
        let value = self.values.get(key);
        ConfigurationError::InvalidValue {
            key: key.to_string(),
            value: value.map(|v| v.value.clone()).unwrap_or_default(),
            origin: value.map_or(Origin::Code, |v| v.origin.clone()),
            expected: expected.into(),
        }
    }

    /// `key` as a duration, if set.
    pub fn duration(&self, key: &str) -> Result<Option<std::time::Duration>, ConfigurationError> {
        self.values
            .get(key)
            .map(|v| {
                parse_duration(&v.value).ok_or_else(|| self.invalid(key, duration::DURATION_FORMS))
            })
            .transpose()
    }

    /// `key` as a memory size in bytes, if set.
    pub fn memory_size(&self, key: &str) -> Result<Option<u64>, ConfigurationError> {
        self.values
            .get(key)
            .map(|v| {
                parse_memory_size(&v.value)
                    .ok_or_else(|| self.invalid(key, memory_size::MEMORY_SIZE_FORMS))
            })
            .transpose()
    }

    /// `key` as a whole number within its option's bounds, if set.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ConfigurationError> {
        let Some(value) = self.values.get(key) else {
            return Ok(None);
        };
        let (min, max) = match options::find(key).map(|o| o.kind) {
            Some(OptionKind::Integer { min, max }) => (min, max),
            _ => (i64::MIN, i64::MAX),
        };
        match value.value.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.invalid(key, format!("a whole number from {min} to {max}"))),
        }
    }

    /// `key` as a number, if set.
    pub fn float(&self, key: &str) -> Result<Option<f64>, ConfigurationError> {
        self.values
            .get(key)
            .map(|v| {
                v.value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| self.invalid(key, "a number"))
            })
            .transpose()
    }

    /// `key` as `true` or `false`, if set.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigurationError> {
        self.values
            .get(key)
            .map(|v| match v.value.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.invalid(key, "`true` or `false`")),
            })
            .transpose()
    }

    /// `key` as one of its option's names, in the option's spelling, if set. A value is
    /// matched as Flink matches enum options — in any case — and with `-` for `_`, so that
    /// `allow-duplicates`, as messages write it, names `ALLOW_DUPLICATES`.
    pub fn enumeration(&self, key: &str) -> Result<Option<&'static str>, ConfigurationError> {
        let Some(value) = self.values.get(key) else {
            return Ok(None);
        };
        let names: &[&str] = match options::find(key).map(|o| o.kind) {
            Some(OptionKind::Enumeration(names)) => names,
            _ => &[],
        };
        names
            .iter()
            .find(|n| names_the_same(n, value.value.trim()))
            .copied()
            .map(Some)
            .ok_or_else(|| {
                self.invalid(
                    key,
                    format!("one of {} (in any case, `-` for `_`)", names.join(", ")),
                )
            })
    }

    /// `key` as text, if set.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|v| v.value.as_str())
    }
}

/// Whether `given` names the enum constant `name`: equal ignoring ASCII case, with `-` or `_`
/// for each `_`.
fn names_the_same(name: &str, given: &str) -> bool {
    name.len() == given.len()
        && name
            .bytes()
            .zip(given.bytes())
            .all(|(n, g)| n.eq_ignore_ascii_case(&g) || (n == b'_' && g == b'-'))
}

fn split_assignment(text: &str) -> Option<(String, String)> {
    let at = text.find(['=', ':'])?;
    let (key, value) = (text[..at].trim(), text[at + 1..].trim());
    (!key.is_empty()).then(|| (key.to_string(), value.to_string()))
}

fn check_kind(key: &str, value: &ConfigValue, kind: OptionKind) -> Result<(), ConfigurationError> {
    let mut one = Configuration::new();
    one.values.insert(key.to_string(), value.clone());
    match kind {
        OptionKind::Duration => one.duration(key).map(drop),
        OptionKind::MemorySize => one.memory_size(key).map(drop),
        OptionKind::Integer { .. } => one.integer(key).map(drop),
        OptionKind::Float => one.float(key).map(drop),
        OptionKind::Boolean => one.boolean(key).map(drop),
        OptionKind::Enumeration(_) => one.enumeration(key).map(drop),
        OptionKind::Text => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_sources_override_earlier_ones() {
        let mut c =
            Configuration::from_yaml_str("rest.port: 8081\nparallelism.default: 2\n", "weir.yaml")
                .unwrap();
        c = c
            .with_environment([
                ("WEIR_REST_PORT".to_string(), "9000".to_string()),
                (
                    "WEIR_PROPERTIES".to_string(),
                    "parallelism.default: 3\n# comment\n".to_string(),
                ),
                ("WEIR_ROLE".to_string(), "jobmanager".to_string()),
            ])
            .unwrap();
        assert_eq!(
            c.get("rest.port").unwrap().origin,
            Origin::Environment("WEIR_REST_PORT".into())
        );
        assert_eq!(c.integer("parallelism.default").unwrap(), Some(3));
        c.set_dynamic("rest.port=9100").unwrap();
        assert_eq!(c.integer("rest.port").unwrap(), Some(9100));
        assert_eq!(c.get("rest.port").unwrap().origin, Origin::CommandLine);
        assert!(c.validate().is_ok());
        assert_eq!(
            c.entries().count(),
            2,
            "unrelated WEIR_ variables are not keys"
        );
    }

    #[test]
    fn bad_values_name_the_key_the_place_and_what_it_takes() {
        let c = Configuration::from_yaml_str(
            "parallelism.default: 0\nrest:\n  port: eighty\n",
            "conf/weir.yaml",
        )
        .unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "conf/weir.yaml:1: `parallelism.default: 0` is invalid: a whole number from 1 to 32768"
        );
        let c = Configuration::from_yaml_str("rest.port: eighty\n", "weir.yaml").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("weir.yaml:1: `rest.port: eighty` is invalid"));
        let mut c = Configuration::new();
        c.set_dynamic("execution.checkpointing.interval=soon")
            .unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "-D on the command line: `execution.checkpointing.interval: soon` is invalid: a duration such as `500 ms`, `10 s`, `1 min`, `2 h` or a number of milliseconds"
        );
        let c = Configuration::new()
            .with_environment([(
                "WEIR_EXECUTION_CHECKPOINTING_MODE".to_string(),
                "twice".to_string(),
            )])
            .unwrap();
        assert!(c.validate().unwrap_err().to_string().starts_with(
            "environment variable WEIR_EXECUTION_CHECKPOINTING_MODE: `execution.checkpointing.mode: twice` is invalid: one of EXACTLY_ONCE, AT_LEAST_ONCE"
        ));
        assert!(Configuration::new().set_dynamic("no-equals-sign").is_err());
        let missing = Configuration::from_yaml_file("/nonexistent/weir.yaml").unwrap_err();
        assert!(missing
            .to_string()
            .starts_with("cannot read the configuration file `/nonexistent/weir.yaml`"));
    }

    #[test]
    fn enum_values_parse_in_any_case_and_with_hyphens_as_messages_write_them() {
        for given in ["allow-duplicates", "ALLOW_DUPLICATES", "Allow_Duplicates"] {
            let mut c = Configuration::new();
            c.set_dynamic(&format!("recovery.fallback-on-corrupt-checkpoint={given}"))
                .unwrap();
            assert_eq!(
                c.enumeration("recovery.fallback-on-corrupt-checkpoint")
                    .unwrap(),
                Some("ALLOW_DUPLICATES"),
                "{given}"
            );
            c.validate().unwrap();
        }
        let mut c = Configuration::new();
        c.set_dynamic("execution.checkpointing.mode=at-least-once")
            .unwrap();
        assert_eq!(
            c.enumeration("execution.checkpointing.mode").unwrap(),
            Some("AT_LEAST_ONCE")
        );
        for wrong in ["allow_duplicate", "allow duplicates", "allow--duplicates"] {
            let mut c = Configuration::new();
            c.set_dynamic(&format!("recovery.fallback-on-corrupt-checkpoint={wrong}"))
                .unwrap();
            assert!(c.validate().is_err(), "{wrong}");
        }
        assert!(names_the_same("EXACTLY_ONCE", "exactly-once"));
        assert!(!names_the_same("EXACTLY_ONCE", "exactly_onc"));
        assert!(!names_the_same("EXACTLY-ONCE", "exactly_once"));
    }
}
