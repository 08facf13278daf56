//! The entry point of a job: `StreamExecutionEnvironment`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use crate::api::data_stream::DataStream;
use crate::api::graph_builder::{GraphBuilder, PendingNode};
use crate::config::ExecutionConfig;
use crate::connectors::collection::CollectionSource;
use crate::connectors::generator::GeneratorSource;
use crate::connectors::source::Source;
use crate::error::{ConfigError, GraphError, WeirError};
use crate::graph::explain::ExecutionPlan;
use crate::graph::stream_graph::OperatorKind;
use crate::record::Record;
use crate::runtime::job_result::JobExecutionResult;
use crate::runtime::mini_cluster::{JobClient, MiniCluster, PipelineExecutor};
use crate::runtime::operator_factory::NodeFactory;
use crate::runtime::source_task::SourceOperatorFactory;
use crate::runtime::stream_type::TypeOf;
use crate::time::WatermarkStrategy;

/// Where a job is declared and run (Flink's `StreamExecutionEnvironment`). This one runs
/// jobs on a local mini-cluster: one thread per subtask.
///
/// ```
/// use weir::{ExecutionConfig, StreamExecutionEnvironment};
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let counts = env
///     .from_collection(vec!["a", "b", "a"].into_iter().map(String::from).collect())
///     .key_by(|w: &String| w.clone())
///     .count()
///     .collect();
/// env.execute("word count")?;
/// let mut counts = counts.take();
/// counts.sort();
/// assert_eq!(counts, vec![("a".into(), 1), ("a".into(), 2), ("b".into(), 1)]);
/// # Ok::<(), weir::WeirError>(())
/// ```
pub struct StreamExecutionEnvironment {
    builder: Rc<RefCell<GraphBuilder>>,
    /// Where `execute` runs the job; `None`: the local mini-cluster.
    executor: RefCell<Option<Rc<dyn PipelineExecutor>>>,
    /// Whether the settings a launcher passes (`weir run`) were applied.
    configured: std::cell::Cell<bool>,
}

impl StreamExecutionEnvironment {
    /// An environment with `config`, rejected if a value is invalid.
    pub fn new(config: ExecutionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            builder: Rc::new(RefCell::new(GraphBuilder::new(config))),
            executor: RefCell::new(None),
            configured: std::cell::Cell::new(false),
        })
    }

    /// An environment with the default configuration (parallelism = number of cores).
    pub fn local() -> Self {
        Self {
            builder: Rc::new(RefCell::new(GraphBuilder::new(ExecutionConfig::default()))),
            executor: RefCell::new(None),
            configured: std::cell::Cell::new(false),
        }
    }

    /// Applies what `configuration` sets (a `weir.yaml` with its environment and `-D`
    /// overrides) over the job's configuration, as Flink's `configure`: keys it sets win
    /// over what the program set before. An unknown key or a bad value is an error that
    /// names it and where it was written.
    ///
    /// ```
    /// use weir::configuration::Configuration;
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let mut configuration = Configuration::new();
    /// configuration.set_dynamic("parallelism.default=3")?;
    /// env.configure(&configuration)?;
    /// assert_eq!(env.config().parallelism, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn configure(
        &self,
        configuration: &crate::configuration::Configuration,
    ) -> Result<(), crate::configuration::ConfigurationError> {
        let mut config = self.config();
        configuration.apply(&mut config)?;
        self.builder.borrow_mut().config = config;
        Ok(())
    }

    /// Records that the settings a launcher hands the job binary (`weir run`: `--config`,
    /// `-D`, `--resume`, the REST endpoint, in `WEIR_CONFIG_FILE`, `WEIR_DYNAMIC_PROPERTIES`
    /// and `WEIR_ROLE`) were applied to this environment; `weir_cluster::apply` calls it.
    /// Under `weir run`, a job whose environment never had them applied is refused.
    pub fn mark_launcher_settings_applied(&self) {
        self.configured.set(true);
    }

    /// Refuses to run a job whose binary `weir run` started without the binary applying the
    /// settings `weir run` handed it: it would ignore `--config`, `-D` and `--resume`, and
    /// serve no endpoint to follow it through.
    fn refuse_unapplied_cli_settings(&self) -> Result<(), WeirError> {
        if self.configured.get() || std::env::var_os(crate::cli::STARTED_BY_WEIR_RUN).is_none() {
            return Ok(());
        }
        Err(WeirError::InvalidRequest(
            "this job binary was started by `weir run`, which hands it its settings (`--config`, \
             `-D`, `--resume`, `--jobmanager` and the REST endpoint `weir run` follows the job \
             through) in the environment, but the binary does not apply them. Build it on the job \
             template in weir-cluster's README: flatten `weir_cluster::ClusterArgs` into its arguments and \
             call `weir_cluster::apply(&args.cluster, &env)` before `execute`; or run the binary \
             directly, without `weir run`"
                .into(),
        ))
    }

    /// The job's configuration.
    pub fn config(&self) -> ExecutionConfig {
        self.builder.borrow().config.clone()
    }

    /// Takes a checkpoint every `interval` (Flink's `enableCheckpointing`), exactly once,
    /// into the configured checkpoint storage (in memory unless a directory is set). The
    /// configuration is checked when the job is executed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::local();
    /// env.enable_checkpointing(Duration::from_secs(1)).set_parallelism(2);
    /// assert_eq!(env.config().checkpoint.interval, Some(Duration::from_secs(1)));
    /// assert_eq!(env.config().parallelism, 2);
    /// ```
    pub fn enable_checkpointing(&self, interval: Duration) -> &Self {
        self.builder.borrow_mut().config.checkpoint.interval = Some(interval);
        self
    }

    /// Sets the default parallelism of operators that do not set their own (Flink's
    /// `setParallelism`); checked when the job is executed.
    pub fn set_parallelism(&self, parallelism: u32) -> &Self {
        self.builder.borrow_mut().config.parallelism = parallelism;
        self
    }

    /// Adds a source.
    pub fn from_source<S: Source>(
        &self,
        source: S,
        watermark_strategy: WatermarkStrategy<S::Output>,
        name: &str,
    ) -> DataStream<S::Output> {
        if let Err(reason) = source.validate() {
            self.builder.borrow_mut().error(GraphError::InvalidSource {
                source_name: name.to_string(),
                reason,
            });
        }
        let generates_event_time =
            watermark_strategy.has_watermarks() || watermark_strategy.has_timestamp_assigner();
        let watermarks = generates_event_time.then(|| watermark_strategy.describe());
        let mut node = PendingNode::new(
            format!("Source: {name}"),
            OperatorKind::Source,
            TypeOf::<S::Output>::shared(),
            NodeFactory::Source(Box::new(SourceOperatorFactory::new(
                source,
                watermark_strategy,
            ))),
        );
        node.generates_event_time = generates_event_time;
        node.watermarks = watermarks;
        let id = self.builder.borrow_mut().add_node(node, &[]);
        DataStream::from_node(self.builder.clone(), id)
    }

    /// Adds a bounded generator source emitting `f(0) … f(count - 1)`.
    pub fn generate<T: Record, F: Fn(u64) -> T + Clone + Send + 'static>(
        &self,
        count: u64,
        f: F,
    ) -> DataStream<T> {
        self.from_source(
            GeneratorSource::new(count, f),
            WatermarkStrategy::no_watermarks(),
            "Generator",
        )
    }

    /// Adds a source emitting the elements of `items` in order (parallelism 1).
    pub fn from_collection<T: Record + Sync>(&self, items: Vec<T>) -> DataStream<T> {
        self.from_source(
            CollectionSource::new(items),
            WatermarkStrategy::no_watermarks(),
            "Collection",
        )
    }

    /// The four layers of the job declared so far.
    pub fn plan(&self, job_name: &str) -> Result<ExecutionPlan, WeirError> {
        self.builder.borrow().plan(job_name)
    }

    /// The plan as text: operators, chains, subtasks and channels.
    pub fn explain(&self, job_name: &str) -> Result<String, WeirError> {
        Ok(self.plan(job_name)?.to_text())
    }

    /// Runs the job to its end (bounded sources) or until it fails. Returns per-operator
    /// record counts and the wall time, or the first failure with the operator and subtask
    /// it happened in.
    ///
    /// With an executor set ([`set_executor`](Self::set_executor)), the executor runs it: in
    /// cluster mode this process then plays its role (JobManager or TaskManager) in the job.
    pub fn execute(&self, job_name: &str) -> Result<JobExecutionResult, WeirError> {
        self.refuse_unapplied_cli_settings()?;
        let executor = self.executor.borrow().clone();
        match executor {
            Some(executor) => {
                let definition = self.builder.borrow_mut().take_definition(job_name)?;
                executor.execute(definition)
            }
            None => self.execute_async(job_name)?.wait(),
        }
    }

    /// Starts the job and returns at once with its client, through which savepoints are
    /// taken, the job is stopped or cancelled, and checkpoint statistics are read.
    pub fn execute_async(&self, job_name: &str) -> Result<JobClient, WeirError> {
        self.refuse_unapplied_cli_settings()?;
        let definition = self.builder.borrow_mut().take_definition(job_name)?;
        let executor = self.executor.borrow().clone();
        match executor {
            Some(executor) => executor.submit(definition),
            None => MiniCluster::submit(definition),
        }
    }

    /// The job declared so far, ready to run (for the runtime's own tests).
    #[cfg(test)]
    pub(crate) fn definition(
        &self,
        job_name: &str,
    ) -> Result<crate::runtime::job_definition::JobDefinition, WeirError> {
        self.builder.borrow_mut().take_definition(job_name)
    }

    /// Runs the jobs of this environment with `executor` instead of the local mini-cluster
    /// (Flink's `PipelineExecutor`); cluster mode sets it from its role flags.
    pub fn set_executor(&self, executor: impl PipelineExecutor + 'static) {
        *self.executor.borrow_mut() = Some(Rc::new(executor));
    }
}
