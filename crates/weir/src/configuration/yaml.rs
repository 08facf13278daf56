//! Reads a `weir.yaml` into flat `key → value` entries with the line each was written on.
//! Nested mappings are flattened with dots, so `execution: {checkpointing: {interval: 10 s}}`
//! and `execution.checkpointing.interval: 10 s` mean the same, as in Flink's `config.yaml`;
//! a list becomes its items joined by `;`, as Flink writes list values.

use std::path::Path;

use yaml_rust2::parser::{MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;
use yaml_rust2::Event;

use super::{ConfigurationError, Origin};

/// One `key: value` of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) line: usize,
}

/// Where the reader is in the document.
enum Frame {
    /// In a mapping whose keys are prefixed with `prefix`; `key` is the key read and
    /// waiting for its value (with its line).
    Mapping {
        prefix: String,
        key: Option<(String, usize)>,
    },
    /// In a list that is the value of `key`.
    List {
        key: String,
        line: usize,
        items: Vec<String>,
    },
}

struct Flattener {
    stack: Vec<Frame>,
    entries: Vec<Entry>,
    error: Option<(String, usize)>,
    documents: usize,
}

impl Flattener {
    fn fail(&mut self, reason: impl Into<String>, line: usize) {
        if self.error.is_none() {
            self.error = Some((reason.into(), line));
        }
    }

    /// A value (or a nested structure) starts at `line`: the key it belongs to.
    fn take_key(&mut self, line: usize) -> Option<(String, usize)> {
        match self.stack.last_mut() {
            Some(Frame::Mapping { prefix, key }) => key.take().map(|(k, l)| (join(prefix, &k), l)),
            _ => {
                self.fail("expected a mapping of keys to values", line);
                None
            }
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

impl MarkedEventReceiver for Flattener {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line();
        match event {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail("holds more than one YAML document", line);
                }
            }
            Event::MappingStart(..) => {
                match self.stack.last_mut() {
                    None => self.stack.push(Frame::Mapping {
                        prefix: String::new(),
                        key: None,
                    }),
                    Some(Frame::Mapping { key: None, .. }) => {
                        self.fail("a mapping cannot be a key", line);
                    }
                    Some(Frame::Mapping { .. }) => {
                        if let Some((prefix, _)) = self.take_key(line) {
                            self.stack.push(Frame::Mapping { prefix, key: None });
                        }
                    }
                    Some(Frame::List { key, .. }) => {
                        let key = key.clone();
                        self.fail(format!("the list of `{key}` holds a mapping; list items must be plain values"), line);
                    }
                }
            }
            Event::MappingEnd => {
                self.stack.pop();
            }
            Event::SequenceStart(..) => match self.stack.last() {
                Some(Frame::Mapping { key: Some(_), .. }) => {
                    if let Some((key, line)) = self.take_key(line) {
                        self.stack.push(Frame::List {
                            key,
                            line,
                            items: Vec::new(),
                        });
                    }
                }
                _ => self.fail("a list must be the value of a key", line),
            },
            Event::SequenceEnd => {
                if let Some(Frame::List { key, line, items }) = self.stack.pop() {
                    self.entries.push(Entry {
                        key,
                        value: items.join(";"),
                        line,
                    });
                }
            }
            Event::Scalar(value, ..) => match self.stack.last_mut() {
                Some(Frame::Mapping {
                    key: key @ None, ..
                }) => {
                    *key = Some((value, line));
                }
                Some(Frame::Mapping { .. }) => {
                    if let Some((key, key_line)) = self.take_key(line) {
                        self.entries.push(Entry {
                            key,
                            value,
                            line: key_line,
                        });
                    }
                }
                Some(Frame::List { items, .. }) => items.push(value),
                None => {
                    if !value.trim().is_empty() {
                        self.fail("expected a mapping of keys to values", line);
                    }
                }
            },
            Event::Alias(_) => self.fail("YAML aliases are not supported", line),
            _ => {}
        }
    }
}

/// The entries of `text`, read from `file` (for error messages).
pub(crate) fn read_entries(text: &str, file: &Path) -> Result<Vec<Entry>, ConfigurationError> {
    let mut flattener = Flattener {
        stack: Vec::new(),
        entries: Vec::new(),
        error: None,
        documents: 0,
    };
    let mut parser = Parser::new_from_str(text);
    parser
        .load(&mut flattener, false)
        .map_err(|e| ConfigurationError::Syntax {
            origin: Origin::File {
                path: file.to_path_buf(),
                line: e.marker().line(),
            },
            reason: format!("not valid YAML: {}", e.info()),
        })?;
    if let Some((reason, line)) = flattener.error {
        return Err(ConfigurationError::Syntax {
            origin: Origin::File {
                path: file.to_path_buf(),
                line,
            },
            reason,
        });
    }
    // The same key twice (nested and flat forms included) is a mistake, not an override.
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for entry in &flattener.entries {
        if let Some(first) = seen.insert(&entry.key, entry.line) {
            return Err(ConfigurationError::Syntax {
                origin: Origin::File {
                    path: file.to_path_buf(),
                    line: entry.line,
                },
                reason: format!("`{}` is set twice (first on line {first})", entry.key),
            });
        }
    }
    Ok(flattener.entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str) -> Result<Vec<(String, String, usize)>, ConfigurationError> {
        Ok(read_entries(text, Path::new("weir.yaml"))?
            .into_iter()
            .map(|e| (e.key, e.value, e.line))
            .collect())
    }

    #[test]
    fn nested_and_flat_keys_flatten_with_their_lines() {
        let text = "# comment\nparallelism.default: 4\nexecution:\n  checkpointing:\n    interval: 10 s\n    mode: EXACTLY_ONCE\nrest:\n  port: 8081\nlist: [a, b]\n";
        assert_eq!(
            entries(text).unwrap(),
            vec![
                ("parallelism.default".into(), "4".into(), 2),
                ("execution.checkpointing.interval".into(), "10 s".into(), 5),
                (
                    "execution.checkpointing.mode".into(),
                    "EXACTLY_ONCE".into(),
                    6
                ),
                ("rest.port".into(), "8081".into(), 8),
                ("list".into(), "a;b".into(), 9),
            ]
        );
        assert_eq!(entries("").unwrap(), vec![]);
    }

    #[test]
    fn malformed_files_name_the_line() {
        let err = entries("a: 1\nb: [unclosed\nc: 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("weir.yaml:"), "{err}");
        let err = entries("a: 1\na: 2\n").unwrap_err().to_string();
        assert_eq!(err, "weir.yaml:2: `a` is set twice (first on line 1)");
        let err = entries("a:\n  b: 1\na.b: 2\n").unwrap_err().to_string();
        assert!(err.contains("`a.b` is set twice"), "{err}");
        let err = entries("- a\n- b\n").unwrap_err().to_string();
        assert!(err.contains("weir.yaml:1"), "{err}");
        let err = entries("just text").unwrap_err().to_string();
        assert!(err.contains("expected a mapping"), "{err}");
    }
}
