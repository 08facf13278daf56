//! `weir config`: the configuration keys, and a check of a configuration.

use std::path::Path;

use anyhow::Result;
use weir::configuration::{Configuration, OptionKind, OPTIONS};

use crate::output::table;

fn kind(kind: OptionKind) -> String {
    match kind {
        OptionKind::Duration => "duration".into(),
        OptionKind::MemorySize => "memory size".into(),
        OptionKind::Integer { min, max } => format!("integer {min}..={max}"),
        OptionKind::Float => "number".into(),
        OptionKind::Boolean => "true|false".into(),
        OptionKind::Enumeration(names) => names.join("|"),
        OptionKind::Text => "text".into(),
    }
}

/// Lists every key; with `check`, loads the configuration (the file, the environment, the
/// `-D`s) and validates it, printing what is set and where.
pub fn config(check: bool, file: Option<&Path>, dynamic: &[String]) -> Result<()> {
    if !check {
        let rows: Vec<Vec<String>> = OPTIONS
            .iter()
            .map(|o| vec![o.key.to_string(), kind(o.kind), o.description.to_string()])
            .collect();
        print!("{}", table(&["KEY", "VALUE", "WHAT"], &rows));
        return Ok(());
    }
    let mut configuration = Configuration::load(file)?;
    for assignment in dynamic {
        configuration.set_dynamic(assignment)?;
    }
    configuration.validate()?;
    let rows: Vec<Vec<String>> = configuration
        .entries()
        .map(|(k, v)| {
            let value = if k.contains("token") {
                "********".to_string()
            } else {
                v.value.clone()
            };
            vec![k.to_string(), value, v.origin.to_string()]
        })
        .collect();
    if rows.is_empty() {
        println!("Nothing is set: every key has its default.");
    } else {
        print!("{}", table(&["KEY", "VALUE", "SET AT"], &rows));
    }
    println!("The configuration is valid.");
    Ok(())
}
