//! Every configuration key Weir understands, named as Flink names it where it means the
//! same thing, with the kind of value it takes — the catalog that unknown keys are checked
//! against and that `weir config` prints.

/// The kind of value a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A duration (`10 s`, `500 ms`, a number of milliseconds).
    Duration,
    /// A memory size (`64 mb`, `1 gb`, a number of bytes).
    MemorySize,
    /// A whole number between the bounds.
    Integer {
        /// Smallest.
        min: i64,
        /// Largest.
        max: i64,
    },
    /// A number with a fraction.
    Float,
    /// `true` or `false`.
    Boolean,
    /// One of the names (compared without case).
    Enumeration(&'static [&'static str]),
    /// Free text (a path, an address, a URL, a secret).
    Text,
}

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigOption {
    /// The key.
    pub key: &'static str,
    /// What it takes.
    pub kind: OptionKind,
    /// What it does.
    pub description: &'static str,
}

const fn option(key: &'static str, kind: OptionKind, description: &'static str) -> ConfigOption {
    ConfigOption {
        key,
        kind,
        description,
    }
}

const fn int(min: i64, max: i64) -> OptionKind {
    OptionKind::Integer { min, max }
}

use OptionKind::{Boolean, Duration, Enumeration, Float, MemorySize, Text};

/// Every key, in the order the documentation lists them.
pub const OPTIONS: &[ConfigOption] = &[
    option(
        "parallelism.default",
        int(1, 32_768),
        "Parallelism of operators that set none.",
    ),
    option(
        "pipeline.max-parallelism",
        int(1, 32_768),
        "Key groups: the upper bound for rescaling keyed state.",
    ),
    option(
        "pipeline.operator-chaining.enabled",
        Boolean,
        "Whether operators may be chained into one task.",
    ),
    option(
        "pipeline.auto-watermark-interval",
        Duration,
        "How often watermark generators emit periodically (0: never).",
    ),
    option(
        "execution.buffer-timeout.interval",
        Duration,
        "A partly filled batch is sent at the latest this long after it was started.",
    ),
    option(
        "execution.batch-size",
        int(1, 1 << 20),
        "Records per batch sent through a channel (Weir's network buffer, counted in records).",
    ),
    option(
        "execution.channel-capacity",
        int(1, 1 << 16),
        "Batches a channel holds before its producer blocks.",
    ),
    option(
        "execution.record-origins",
        Enumeration(&["AFTER_USER_FAILURE", "ALWAYS", "NEVER"]),
        "When sources say where each record was read, so that an operator failing on one names it.",
    ),
    option(
        "execution.checkpointing.interval",
        Duration,
        "Time between checkpoints; unset: no periodic checkpoints.",
    ),
    option(
        "execution.checkpointing.mode",
        Enumeration(&["EXACTLY_ONCE", "AT_LEAST_ONCE"]),
        "Aligned (exactly once) or unaligned-free at-least-once barriers.",
    ),
    option(
        "execution.checkpointing.timeout",
        Duration,
        "A checkpoint not complete after this long expires.",
    ),
    option(
        "execution.checkpointing.min-pause",
        Duration,
        "Least time between the end of one checkpoint and the next trigger.",
    ),
    option(
        "execution.checkpointing.max-concurrent-checkpoints",
        int(1, 1_000),
        "Checkpoints in flight at once.",
    ),
    option(
        "execution.checkpointing.unaligned.enabled",
        Boolean,
        "Unaligned checkpoints: barriers overtake the records in flight, which are stored as channel state.",
    ),
    option(
        "execution.checkpointing.unaligned",
        Boolean,
        "Unaligned checkpoints (the key before Flink 2.0).",
    ),
    option(
        "execution.checkpointing.aligned-checkpoint-timeout",
        Duration,
        "With unaligned checkpoints on: align first, and go unaligned after this long.",
    ),
    option(
        "execution.checkpointing.tolerable-failed-checkpoints",
        int(0, 1_000_000),
        "Consecutive failed checkpoints tolerated before the job fails.",
    ),
    option(
        "execution.checkpointing.num-retained",
        int(1, 1_000),
        "Completed checkpoints kept.",
    ),
    option(
        "state.checkpoints.num-retained",
        int(1, 1_000),
        "Completed checkpoints kept (the key before Flink 2.0).",
    ),
    option(
        "execution.checkpointing.externalized-checkpoint-retention",
        Enumeration(&["RETAIN_ON_CANCELLATION", "DELETE_ON_CANCELLATION"]),
        "What cancelling a job does to its retained checkpoints.",
    ),
    option(
        "execution.checkpointing.dir",
        Text,
        "Where checkpoints and savepoints go: a directory or a URL (file://, s3://, gs://, az://).",
    ),
    option(
        "state.checkpoints.dir",
        Text,
        "Where checkpoints and savepoints go (the key before Flink 2.0).",
    ),
    option(
        "state.storage.fs.memory-threshold",
        MemorySize,
        "A subtask's operator state larger than this goes into a state file of the checkpoint instead of its metadata (default 20 kb).",
    ),
    option(
        "state.backend.type",
        Text,
        "Where keyed state lives: `heap` (Flink's `hashmap`, the default) or a backend registered by a crate the job links, as `rocksdb`.",
    ),
    option(
        "state.backend.incremental",
        Boolean,
        "Whether checkpoints upload only what changed since the previous one, where the backend can.",
    ),
    option(
        "state.backend.local-dir",
        Text,
        "Where a disk state backend keeps its working files (default: the system's temporary directory).",
    ),
    option(
        "state.backend.rocksdb.memory.fixed-per-slot",
        MemorySize,
        "The memory the RocksDB backend of one keyed operator subtask may use for its block cache and write buffers together (default 128 mb).",
    ),
    option(
        "state.backend.rocksdb.memory.write-buffer-ratio",
        Float,
        "The share of the RocksDB backend's memory that write buffers (memtables) may take (default 0.5).",
    ),
    option(
        "state.backend.rocksdb.thread.num",
        int(1, 64),
        "Background threads of each RocksDB instance, for flushes and compactions (default 2).",
    ),
    option(
        "state.backend.local-recovery",
        Boolean,
        "Keep a second copy of every checkpoint file under `taskmanager.state.local.root-dirs`.",
    ),
    option(
        "taskmanager.state.local.root-dirs",
        Text,
        "Where local recovery keeps its copies.",
    ),
    option(
        "recovery.fallback-on-corrupt-checkpoint",
        Enumeration(&["REFUSE", "ALLOW_DUPLICATES"]),
        "Whether recovery may fall back past a corrupt checkpoint whose output is committed.",
    ),
    option(
        "execution.start-mode",
        Enumeration(&["FRESH", "RESUME"]),
        "Where the job starts without `execution.savepoint.path`: FRESH (empty state; refused over an earlier run that committed output) or RESUME (the job's newest restore point, if it has one; `weir run --resume`).",
    ),
    option(
        "execution.savepoint.path",
        Text,
        "Start the job from this savepoint or retained checkpoint.",
    ),
    option(
        "execution.savepoint.ignore-unclaimed-state",
        Boolean,
        "Allow state of operators the job no longer has to be dropped on restore.",
    ),
    option(
        "restart-strategy.type",
        Enumeration(&[
            "none",
            "disable",
            "off",
            "fixed-delay",
            "fixeddelay",
            "exponential-delay",
            "exponentialdelay",
            "failure-rate",
            "failurerate",
        ]),
        "What to do when a task fails.",
    ),
    option(
        "restart-strategy.fixed-delay.attempts",
        int(0, i32::MAX as i64),
        "Restarts allowed (fixed-delay).",
    ),
    option(
        "restart-strategy.fixed-delay.delay",
        Duration,
        "Wait before each restart (fixed-delay).",
    ),
    option(
        "restart-strategy.exponential-delay.initial-backoff",
        Duration,
        "First wait (exponential-delay).",
    ),
    option(
        "restart-strategy.exponential-delay.max-backoff",
        Duration,
        "Longest wait (exponential-delay).",
    ),
    option(
        "restart-strategy.exponential-delay.backoff-multiplier",
        Float,
        "Growth of the wait (exponential-delay, above 1).",
    ),
    option(
        "restart-strategy.exponential-delay.jitter-factor",
        Float,
        "Random spread of the wait, 0 to 1 (exponential-delay).",
    ),
    option(
        "restart-strategy.exponential-delay.reset-backoff-threshold",
        Duration,
        "Failure-free time after which the wait resets (exponential-delay).",
    ),
    option(
        "restart-strategy.failure-rate.max-failures-per-interval",
        int(1, i32::MAX as i64),
        "Failures allowed per interval (failure-rate).",
    ),
    option(
        "restart-strategy.failure-rate.failure-rate-interval",
        Duration,
        "The interval (failure-rate).",
    ),
    option(
        "restart-strategy.failure-rate.delay",
        Duration,
        "Wait before each restart (failure-rate).",
    ),
    option(
        "metrics.fetcher.update-interval",
        Duration,
        "How often the JobManager samples the tasks' metrics.",
    ),
    option(
        "rest.port",
        int(0, 65_535),
        "Port of the REST API and dashboard (local mode: off unless set; 0: any free port).",
    ),
    option(
        "rest.bind-address",
        Text,
        "Address the REST API binds to (loopback by default).",
    ),
    option(
        "rest.authentication.token",
        Text,
        "A bearer token every REST request must carry.",
    ),
    option(
        "security.ssl.rest.enabled",
        Boolean,
        "Serve the REST API over HTTPS.",
    ),
    option(
        "security.ssl.rest.cert-file",
        Text,
        "The REST API's PEM certificate chain.",
    ),
    option(
        "security.ssl.rest.key-file",
        Text,
        "The REST API's PEM private key.",
    ),
    option(
        "security.ssl.internal.enabled",
        Boolean,
        "Mutual TLS between the JobManager and the TaskManagers.",
    ),
    option(
        "security.ssl.internal.cert-file",
        Text,
        "This process's PEM certificate chain for internal connections.",
    ),
    option(
        "security.ssl.internal.key-file",
        Text,
        "This process's PEM private key for internal connections.",
    ),
    option(
        "security.ssl.internal.trust-cert-file",
        Text,
        "The PEM CA certificate that internal peers' certificates must be signed by.",
    ),
];

/// The option named `key`.
pub fn find(key: &str) -> Option<&'static ConfigOption> {
    OPTIONS.iter().find(|o| o.key == key)
}

/// The known key closest to `key`, if one is close enough to be a typo of it.
pub fn closest(key: &str) -> Option<&'static str> {
    OPTIONS
        .iter()
        .map(|o| (strsim::jaro_winkler(key, o.key), o.key))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The environment variable that sets `key`: `WEIR_` and the key in capitals, dots and
/// dashes as underscores (`execution.checkpointing.interval` →
/// `WEIR_EXECUTION_CHECKPOINTING_INTERVAL`).
pub fn environment_variable(key: &str) -> String {
    let mut name = String::from("WEIR_");
    name.extend(key.chars().map(|c| match c {
        '.' | '-' => '_',
        c => c.to_ascii_uppercase(),
    }));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_their_variables_distinct() {
        let mut keys: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), OPTIONS.len());
        let mut vars: Vec<String> = OPTIONS
            .iter()
            .map(|o| environment_variable(o.key))
            .collect();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), OPTIONS.len());
    }

    #[test]
    fn typos_get_the_closest_key() {
        assert_eq!(
            closest("execution.checkpointing.intreval"),
            Some("execution.checkpointing.interval")
        );
        assert_eq!(closest("paralelism.default"), Some("parallelism.default"));
        assert_eq!(closest("rest.prot"), Some("rest.port"));
        assert_eq!(closest("completely.unrelated.thing"), None);
    }
}
