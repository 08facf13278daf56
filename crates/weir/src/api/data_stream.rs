//! `DataStream<T>`: a typed stream under construction, and the operators that extend it.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::api::connected_streams::ConnectedStreams;
use crate::api::functions::{ProcessFunction, RuntimeContext};
use crate::api::graph_builder::{
    GraphBuilder, PartitionerSpec, PendingNode, SideOutputSpec, Upstream,
};
use crate::api::join::JoinedStreams;
use crate::api::keyed_stream::KeyedStream;
use crate::api::output_tag::OutputTag;
use crate::api::windowed_stream::WindowedStream;
use crate::connectors::collect::{collect_sink, CollectHandle};
use crate::connectors::print::PrintSink;
use crate::connectors::sink::Sink;
use crate::error::{BoxError, GraphError};
use crate::graph::ids::NodeId;
use crate::graph::stream_graph::{ChainingStrategy, OperatorKind};
use crate::record::{Key, Record};
use crate::runtime::key_selector::{FnKeySelector, KeyGroupOf, KeySelector, RefKeySelector};
use crate::runtime::operator_factory::{FnOperatorFactory, NodeFactory};
use crate::runtime::operators::filter::FilterOperator;
use crate::runtime::operators::flat_map::{FlatMapIterOperator, FlatMapOperator};
use crate::runtime::operators::map::MapOperator;
use crate::runtime::operators::process::ProcessOperator;
use crate::runtime::operators::sink_writer::SinkWriterOperator;
use crate::runtime::operators::timestamps_and_watermarks::TimestampsAndWatermarksOperator;
use crate::runtime::operators::OneInputStreamOperator;
use crate::runtime::output::Collector;
use crate::runtime::stream_type::{SharedAny, TypeOf};
use crate::runtime::task::OperatorSetup;
use crate::time::WatermarkStrategy;
use crate::windowing::assigners::WindowAssigner;
use crate::windowing::trigger::Trigger;

/// A stream of records of type `T`: the output of one operator, or of several (a union),
/// possibly with a partitioning chosen for the next edge.
///
/// Methods that add an operator (`map`, `filter`, …) take `&self`, so one stream can feed
/// several operators. Methods that configure the operator just added (`name`, `uid`,
/// `parallelism`, …) take and return `self`.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let numbers: DataStream<u64> = env.generate(10, |i| i);
/// let evens = numbers.filter(|n| n % 2 == 0).name("evens");
/// let tens = evens.map(|n| n * 10).name("times ten").collect();
/// let odds = numbers.filter(|n| n % 2 == 1).collect(); // one stream feeds two operators
/// env.execute("streams")?;
/// let (mut tens, mut odds) = (tens.take(), odds.take());
/// tens.sort();
/// odds.sort();
/// assert_eq!(tens, vec![0, 20, 40, 60, 80]);
/// assert_eq!(odds, vec![1, 3, 5, 7, 9]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct DataStream<T> {
    pub(crate) builder: Rc<RefCell<GraphBuilder>>,
    pub(crate) upstreams: Vec<Upstream>,
    _record: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        Self {
            builder: self.builder.clone(),
            upstreams: self.upstreams.clone(),
            _record: PhantomData,
        }
    }
}

/// Settings of an operator, applied to the node a stream or sink handle refers to. A
/// misuse is reported with the place in the user's code where the setting was written.
#[track_caller]
pub(crate) fn configure_node(
    builder: &Rc<RefCell<GraphBuilder>>,
    node: Option<NodeId>,
    setting: &str,
    f: impl FnOnce(&mut PendingNode),
) {
    let location = std::panic::Location::caller();
    let mut builder = builder.borrow_mut();
    match node {
        Some(node) => f(builder.node_mut(node)),
        None => builder.error(GraphError::InvalidApiUse(format!(
            "`.{setting}()` at {}:{} applies to an operator, not to a union or a repartitioned \
             stream (after `rebalance()`, `forward()`, `broadcast()` or `union()`): set it on the \
             operator before the repartitioning",
            location.file(),
            location.line()
        ))),
    }
}

impl<T: Record> DataStream<T> {
    pub(crate) fn from_node(builder: Rc<RefCell<GraphBuilder>>, node: NodeId) -> Self {
        Self {
            builder,
            upstreams: vec![Upstream {
                node,
                partitioner: PartitionerSpec::Default,
                side_output: None,
            }],
            _record: PhantomData,
        }
    }

    /// The single operator this stream is the plain output of, if any.
    pub(crate) fn own_node(&self) -> Option<NodeId> {
        match self.upstreams.as_slice() {
            [Upstream {
                node,
                partitioner: PartitionerSpec::Default,
                side_output: None,
            }] => Some(*node),
            _ => None,
        }
    }

    #[track_caller]
    fn configure(self, setting: &str, f: impl FnOnce(&mut PendingNode)) -> Self {
        configure_node(&self.builder, self.own_node(), setting, f);
        self
    }

    /// Adds an operator of output type `O` fed by this stream.
    pub(crate) fn add_operator<O: Record, Op: OneInputStreamOperator<T, O> + 'static>(
        &self,
        name: &str,
        kind: OperatorKind,
        keyed: bool,
        create: impl Fn(&OperatorSetup) -> Result<Op, BoxError> + Send + 'static,
    ) -> DataStream<O> {
        let mut node = PendingNode::new(
            name.to_string(),
            kind,
            TypeOf::<O>::shared(),
            NodeFactory::Operator(Box::new(FnOperatorFactory::<T, O, Op, _>::new(create))),
        );
        node.keyed = keyed;
        let id = self.builder.borrow_mut().add_node(node, &self.upstreams);
        DataStream::from_node(self.builder.clone(), id)
    }

    fn with_partitioner(&self, partitioner: PartitionerSpec) -> DataStream<T> {
        DataStream {
            builder: self.builder.clone(),
            upstreams: self
                .upstreams
                .iter()
                .map(|u| Upstream {
                    node: u.node,
                    partitioner: partitioner.clone(),
                    side_output: u.side_output.clone(),
                })
                .collect(),
            _record: PhantomData,
        }
    }

    /// Applies `f` to each record.
    pub fn map<O: Record, F: FnMut(T) -> O + Clone + Send + 'static>(&self, f: F) -> DataStream<O> {
        self.add_operator("Map", OperatorKind::Operator, false, move |setup| {
            Ok(MapOperator::new(setup, f.clone()))
        })
    }

    /// Keeps the records for which `predicate` is true.
    pub fn filter<F: FnMut(&T) -> bool + Clone + Send + 'static>(
        &self,
        predicate: F,
    ) -> DataStream<T> {
        self.add_operator("Filter", OperatorKind::Operator, false, move |setup| {
            Ok(FilterOperator::new(setup, predicate.clone()))
        })
    }

    /// Calls `f` with each record and a [`Collector`] that takes any number of results
    /// (Flink's `flatMap` with a `FlatMapFunction`).
    ///
    /// ```
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let words = env
    ///     .from_collection(vec!["to be or".to_string(), "not".to_string()])
    ///     .flat_map(|line: String, out: &mut Collector<'_, String>| {
    ///         for word in line.split_whitespace() {
    ///             out.collect(word.to_string());
    ///         }
    ///     })
    ///     .collect();
    /// env.execute("split")?;
    /// assert_eq!(words.take(), vec!["to", "be", "or", "not"]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn flat_map<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Record,
        F: FnMut(T, &mut Collector<'_, O>) + Clone + Send + 'static,
    {
        self.add_operator("Flat Map", OperatorKind::Operator, false, move |setup| {
            Ok(FlatMapOperator::new(setup, f.clone()))
        })
    }

    /// Emits every item of the collection `f` returns for each record: an `Option`, a
    /// `Vec`, a `Result` (its `Ok`), any iterator that owns its items.
    ///
    /// ```
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let evens = env.generate(6, |i| i).flat_map_iter(|i| (i % 2 == 0).then_some(i)).collect();
    /// env.execute("evens")?;
    /// assert_eq!(evens.take(), vec![0, 2, 4]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn flat_map_iter<O, It, F>(&self, f: F) -> DataStream<O>
    where
        O: Record,
        It: IntoIterator<Item = O>,
        F: FnMut(T) -> It + Clone + Send + 'static,
    {
        self.add_operator("Flat Map", OperatorKind::Operator, false, move |setup| {
            Ok(FlatMapIterOperator::new(setup, f.clone()))
        })
    }

    /// Runs a [`ProcessFunction`] over each record.
    pub fn process<O: Record, P: ProcessFunction<T, O>>(&self, function: P) -> DataStream<O> {
        self.add_operator("Process", OperatorKind::Operator, false, move |setup| {
            Ok(ProcessOperator::new(setup, function.clone()))
        })
    }

    /// Partitions by the key `key_selector` extracts: all records of a key go to the same
    /// subtask, which holds that key's state.
    pub fn key_by<K: Key, F: Fn(&T) -> K + Send + Sync + 'static>(
        &self,
        key_selector: F,
    ) -> KeyedStream<T, K> {
        self.keyed_by(FnKeySelector::new(key_selector))
    }

    /// Partitions by the key `selector` extracts.
    fn keyed_by<S: KeySelector<T>>(&self, selector: S) -> KeyedStream<T, S::Key> {
        let selector = Arc::new(selector);
        let key_group_of: Arc<dyn KeyGroupOf<T>> = selector.clone();
        let shared: SharedAny = Arc::new(key_group_of);
        let selector: Arc<dyn KeySelector<T, Key = S::Key>> = selector;
        KeyedStream::new(
            self.with_partitioner(PartitionerSpec::Hash(shared)),
            selector,
        )
    }

    /// Partitions by a key borrowed from each record (a Rust-only variant of
    /// [`key_by`](Self::key_by)): routing a record and finding its state then read the key
    /// in place, where `key_by(|r| r.name.clone())` copies it for each — worth it for keys
    /// that own memory, as strings do.
    ///
    /// ```
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
    /// let totals = env
    ///     .from_collection(vec![("a".to_string(), 1), ("b".to_string(), 2), ("a".to_string(), 3)])
    ///     .key_by_ref(|(name, _): &(String, i64)| name)
    ///     .sum(|(_, n): &(String, i64)| *n)
    ///     .collect();
    /// env.execute("sums")?;
    /// let mut totals = totals.take();
    /// totals.sort();
    /// assert_eq!(totals, vec![("a".to_string(), 1), ("a".to_string(), 4), ("b".to_string(), 2)]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn key_by_ref<K: Key, F>(&self, key_selector: F) -> KeyedStream<T, K>
    where
        F: for<'a> Fn(&'a T) -> &'a K + Send + Sync + 'static,
    {
        self.keyed_by(RefKeySelector::new(key_selector))
    }

    /// The records that this stream's operator sends to side output `tag` (Flink's
    /// `getSideOutput`), as a stream of their own. See [`OutputTag`].
    #[track_caller]
    pub fn side_output<U: Record>(&self, tag: &OutputTag<U>) -> DataStream<U> {
        let location = std::panic::Location::caller();
        let node = self.own_node();
        let mut builder = self.builder.borrow_mut();
        let node = match node {
            Some(node) if builder.is_operator(node) => node,
            _ => {
                builder.error(GraphError::InvalidApiUse(format!(
                    "`.side_output(\"{}\")` at {}:{} reads the side output of an operator \
                     (a process function or a window): call it on that operator's stream, \
                     not on a source, a union or a repartitioned stream",
                    tag.id(),
                    location.file(),
                    location.line()
                )));
                self.own_node().unwrap_or(NodeId(0))
            }
        };
        drop(builder);
        DataStream {
            builder: self.builder.clone(),
            upstreams: vec![Upstream {
                node,
                partitioner: PartitionerSpec::Default,
                side_output: Some(SideOutputSpec {
                    tag: tag.shared_id(),
                    record_type: TypeOf::<U>::shared(),
                }),
            }],
            _record: PhantomData,
        }
    }

    /// Gives the records event timestamps and generates watermarks after `strategy`, in
    /// the middle of a pipeline (Flink's `assignTimestampsAndWatermarks`); prefer giving the
    /// strategy to the source, where each split keeps its own watermark. Watermarks from
    /// upstream are replaced by the new ones.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::windowing::TumblingEventTimeWindows;
    ///
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let counts = env
    ///     .from_collection(vec!["1000,a".to_string(), "1500,b".into(), "2500,a".into()])
    ///     .map(|line: String| {
    ///         let (time, word) = line.split_once(',').unwrap_or(("0", &line));
    ///         (time.parse::<i64>().unwrap_or(0), word.to_string())
    ///     })
    ///     .assign_timestamps_and_watermarks(
    ///         WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|e: &(i64, String), _| e.0),
    ///     )
    ///     .window_all(TumblingEventTimeWindows::of(Duration::from_secs(1)))
    ///     .process(|_: &(), _: &weir::windowing::WindowContext<'_, weir::windowing::TimeWindow>, e: &[(i64, String)], out: &mut Collector<'_, usize>| {
    ///         out.collect(e.len());
    ///         Ok(())
    ///     })
    ///     .collect();
    /// env.execute("assigned")?;
    /// assert_eq!(counts.take(), vec![2, 1]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn assign_timestamps_and_watermarks(
        &self,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        let description = strategy.describe();
        let described = strategy;
        let stream = self.add_operator(
            "Timestamps/Watermarks",
            OperatorKind::Operator,
            false,
            move |setup| {
                Ok(TimestampsAndWatermarksOperator::new(
                    setup,
                    described.clone(),
                ))
            },
        );
        configure_node(
            &stream.builder,
            stream.own_node(),
            "assign_timestamps_and_watermarks",
            |n| {
                n.generates_event_time = true;
                n.watermarks = Some(description);
            },
        );
        stream
    }

    /// Cuts the whole stream into the windows `assigner` makes, in one subtask (Flink's
    /// `windowAll`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::windowing::TumblingEventTimeWindows;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let strategy = WatermarkStrategy::for_monotonous_timestamps()
    ///     .with_timestamp_assigner(|t: &i64, _| *t);
    /// let counts = env
    ///     .from_source(CollectionSource::new(vec![1, 2, 11, 12, 13]), strategy, "times")
    ///     .window_all(TumblingEventTimeWindows::of(Duration::from_millis(10)))
    ///     .aggregate(Count)
    ///     .collect();
    /// env.execute("count per window")?;
    /// assert_eq!(counts.take(), vec![2, 3]);
    ///
    /// #[derive(Clone)]
    /// struct Count;
    /// impl AggregateFunction<i64, u64, u64> for Count {
    ///     fn create_accumulator(&self) -> u64 { 0 }
    ///     fn add(&self, _: i64, acc: &mut u64) { *acc += 1 }
    ///     fn get_result(&self, acc: &u64) -> u64 { *acc }
    ///     fn merge(&self, a: u64, b: u64) -> u64 { a + b }
    /// }
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn window_all<A>(&self, assigner: A) -> WindowedStream<T, (), A, A::DefaultTrigger>
    where
        A: WindowAssigner,
        A::DefaultTrigger: Trigger<A::Window>,
    {
        let selector = Arc::new(FnKeySelector::new(|_: &T| ()));
        let key_group_of: Arc<dyn KeyGroupOf<T>> = selector.clone();
        let shared: SharedAny = Arc::new(key_group_of);
        let selector: Arc<dyn KeySelector<T, Key = ()>> = selector;
        WindowedStream::new(
            self.with_partitioner(PartitionerSpec::Hash(shared)),
            selector,
            assigner,
            A::DefaultTrigger::default(),
            true,
        )
    }

    /// Joins this stream with `other` in windows (Flink's `join`): give both keys with
    /// `where_` and `equal_to`, then the windows and the join function. See
    /// [`JoinedStreams`](crate::api::join::JoinedStreams).
    pub fn join<B: Record>(&self, other: &DataStream<B>) -> JoinedStreams<T, B> {
        JoinedStreams::new(self.clone(), other.clone())
    }

    /// Connects this stream with `other`, of any record type, for an operator that reads
    /// both (Flink's `connect`). See [`ConnectedStreams`].
    pub fn connect<B: Record>(&self, other: &DataStream<B>) -> ConnectedStreams<T, B> {
        ConnectedStreams::new(self.clone(), other.clone())
    }

    /// Merges this stream with `other`: the next operator reads both.
    pub fn union(&self, other: &DataStream<T>) -> DataStream<T> {
        let mut upstreams = self.upstreams.clone();
        upstreams.extend(other.upstreams.iter().cloned());
        DataStream {
            builder: self.builder.clone(),
            upstreams,
            _record: PhantomData,
        }
    }

    /// Sends subtask i's records to subtask i of the next operator (equal parallelism).
    pub fn forward(&self) -> DataStream<T> {
        self.with_partitioner(PartitionerSpec::Forward)
    }

    /// Spreads records round-robin over the next operator's subtasks.
    pub fn rebalance(&self) -> DataStream<T> {
        self.with_partitioner(PartitionerSpec::Rebalance)
    }

    /// Sends every record to every subtask of the next operator.
    pub fn broadcast(&self) -> DataStream<T> {
        self.with_partitioner(PartitionerSpec::Broadcast)
    }

    /// Names the operator (shown in plans, metrics and errors).
    #[track_caller]
    pub fn name(self, name: &str) -> Self {
        let name = name.to_string();
        self.configure("name", |n| n.name = name)
    }

    /// Gives the operator a stable id that maps its state across versions of the job.
    #[track_caller]
    pub fn uid(self, uid: &str) -> Self {
        let uid = uid.to_string();
        self.configure("uid", |n| n.uid = Some(uid))
    }

    /// Sets the operator's parallelism.
    #[track_caller]
    pub fn parallelism(self, parallelism: u32) -> Self {
        self.configure("parallelism", |n| n.parallelism = Some(parallelism))
    }

    /// Sets the operator's number of key groups.
    #[track_caller]
    pub fn max_parallelism(self, max_parallelism: u32) -> Self {
        self.configure("max_parallelism", |n| {
            n.max_parallelism = Some(max_parallelism)
        })
    }

    /// Keeps the operator out of any chain.
    #[track_caller]
    pub fn disable_chaining(self) -> Self {
        self.configure("disable_chaining", |n| n.chaining = ChainingStrategy::Never)
    }

    /// Starts a new chain at the operator (its successors may still chain to it).
    #[track_caller]
    pub fn start_new_chain(self) -> Self {
        self.configure("start_new_chain", |n| n.chaining = ChainingStrategy::Head)
    }

    /// Writes the stream to `sink`.
    pub fn sink_to<S: Sink<T>>(&self, sink: S, name: &str) -> DataStreamSink {
        let commits = sink.commits_on_checkpoint_completion();
        let stream = self.add_operator::<(), _>(
            &format!("Sink: {name}"),
            OperatorKind::Sink,
            false,
            move |setup| {
                let writer = sink.create_writer(&RuntimeContext::of(setup))?;
                Ok(SinkWriterOperator::new(setup, writer))
            },
        );
        let node = stream.own_node();
        configure_node(&stream.builder, node, "sink_to", |n| {
            n.commits_on_checkpoint = commits
        });
        DataStreamSink {
            builder: stream.builder.clone(),
            node,
        }
    }

    /// Prints each record to standard output.
    pub fn print(&self) -> DataStreamSink
    where
        T: std::fmt::Debug,
    {
        self.sink_to(PrintSink::default(), "Print")
    }

    /// Collects the records for the program that runs the job; read them from the handle
    /// after `execute` returns.
    pub fn collect(&self) -> CollectHandle<T> {
        let (sink, handle) = collect_sink();
        self.sink_to(sink, "Collect");
        handle
    }
}

/// A sink in the job, to configure it.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(4))?;
/// let sink: DataStreamSink = env
///     .generate(100, |i| i)
///     .sink_to(DiscardingSink, "discard")
///     .uid("discard")
///     .parallelism(1);
/// # let _ = sink;
/// let plan = env.plan("sinks")?;
/// assert_eq!(plan.stream_graph.nodes[1].parallelism, 1);
/// # Ok::<(), WeirError>(())
/// ```
pub struct DataStreamSink {
    builder: Rc<RefCell<GraphBuilder>>,
    node: Option<NodeId>,
}

impl DataStreamSink {
    /// Names the sink.
    #[track_caller]
    pub fn name(self, name: &str) -> Self {
        let name = name.to_string();
        configure_node(&self.builder, self.node, "name", |n| n.name = name);
        self
    }
    /// Gives the sink a stable id.
    #[track_caller]
    pub fn uid(self, uid: &str) -> Self {
        let uid = uid.to_string();
        configure_node(&self.builder, self.node, "uid", |n| n.uid = Some(uid));
        self
    }
    /// Sets the sink's parallelism.
    #[track_caller]
    pub fn parallelism(self, parallelism: u32) -> Self {
        configure_node(&self.builder, self.node, "parallelism", |n| {
            n.parallelism = Some(parallelism)
        });
        self
    }
    /// Keeps the sink out of any chain.
    #[track_caller]
    pub fn disable_chaining(self) -> Self {
        configure_node(&self.builder, self.node, "disable_chaining", |n| {
            n.chaining = ChainingStrategy::Never
        });
        self
    }
}
