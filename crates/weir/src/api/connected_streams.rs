//! `ConnectedStreams`: two streams of possibly different types, processed by one two-input
//! operator (Flink's `connect`): co-map, co-flat-map, co-process, and keyed on both sides,
//! keyed co-process.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::api::data_stream::DataStream;
use crate::api::functions::{CoProcessFunction, KeyedCoProcessFunction, ProcessContext};
use crate::api::graph_builder::{GraphBuilder, PendingNode};
use crate::api::keyed_stream::KeyedStream;
use crate::error::{BoxError, GraphError};
use crate::graph::stream_graph::OperatorKind;
use crate::record::{Key, Record};
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operator_factory::{NodeFactory, TwoInputOperatorFactory};
use crate::runtime::operators::co_process::{CoProcessOperator, KeyedCoProcessOperator};
use crate::runtime::operators::TwoInputStreamOperator;
use crate::runtime::output::Collector;
use crate::runtime::stream_type::TypeOf;
use crate::runtime::task::OperatorSetup;

/// Two streams connected for one operator that reads both (Flink's `ConnectedStreams`).
/// Barriers align across both inputs, and the operator's watermark is the lower of theirs.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let numbers = env.from_collection(vec![1u64, 2]);
/// let words = env.from_collection(vec!["three".to_string()]);
/// let texts = numbers
///     .connect(&words)
///     .map(|n: u64| format!("number {n}"), |w: String| format!("word {w}"))
///     .collect();
/// env.execute("co-map")?;
/// let mut texts = texts.take();
/// texts.sort();
/// assert_eq!(texts, vec!["number 1", "number 2", "word three"]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct ConnectedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

/// Adds a two-input operator reading `first` and `second`.
fn add_two_input_operator<A, B, O, Op>(
    first: &DataStream<A>,
    second: &DataStream<B>,
    name: &str,
    keyed: bool,
    create: impl Fn(&OperatorSetup) -> Result<Op, BoxError> + Send + 'static,
) -> DataStream<O>
where
    A: Record,
    B: Record,
    O: Record,
    Op: TwoInputStreamOperator<A, B, O> + 'static,
{
    let builder: &Rc<RefCell<GraphBuilder>> = &first.builder;
    if !Rc::ptr_eq(builder, &second.builder) {
        builder
            .borrow_mut()
            .error(GraphError::InvalidApiUse(format!(
                "`{name}` connects streams of two different environments: build both inputs on \
             the same StreamExecutionEnvironment"
            )));
    }
    let mut node = PendingNode::new(
        name.to_string(),
        OperatorKind::Operator,
        TypeOf::<O>::shared(),
        NodeFactory::Operator(Box::new(TwoInputOperatorFactory::<A, B, O, Op, _>::new(
            create,
        ))),
    );
    node.keyed = keyed;
    let id = builder
        .borrow_mut()
        .add_two_input_node(node, &first.upstreams, &second.upstreams);
    DataStream::from_node(builder.clone(), id)
}

impl<A: Record, B: Record> ConnectedStreams<A, B> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        Self { first, second }
    }

    /// Runs a [`CoProcessFunction`] over both inputs.
    pub fn process<O: Record, P: CoProcessFunction<A, B, O>>(&self, function: P) -> DataStream<O> {
        add_two_input_operator(
            &self.first,
            &self.second,
            "Co-Process",
            false,
            move |setup| Ok(CoProcessOperator::new(setup, function.clone())),
        )
    }

    /// Maps each input with its own function to a common output type (Flink's `CoMap`).
    pub fn map<O, F1, F2>(&self, first: F1, second: F2) -> DataStream<O>
    where
        O: Record,
        F1: FnMut(A) -> O + Clone + Send + 'static,
        F2: FnMut(B) -> O + Clone + Send + 'static,
    {
        self.process(CoMap { first, second })
    }

    /// Flat-maps each input with its own function (Flink's `CoFlatMap`).
    pub fn flat_map<O, F1, F2>(&self, first: F1, second: F2) -> DataStream<O>
    where
        O: Record,
        F1: FnMut(A, &mut Collector<'_, O>) + Clone + Send + 'static,
        F2: FnMut(B, &mut Collector<'_, O>) + Clone + Send + 'static,
    {
        self.process(CoFlatMap { first, second })
    }

    /// Partitions both inputs by key, so that a key's records of both reach one subtask
    /// (Flink's `ConnectedStreams.keyBy`).
    pub fn key_by<K, F1, F2>(&self, first: F1, second: F2) -> KeyedConnectedStreams<A, B, K>
    where
        K: Key,
        F1: Fn(&A) -> K + Send + Sync + 'static,
        F2: Fn(&B) -> K + Send + Sync + 'static,
    {
        KeyedConnectedStreams::from_keyed(self.first.key_by(first), self.second.key_by(second))
    }
}

/// Connected streams keyed alike on both sides; see [`KeyedCoProcessFunction`].
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits the keys both inputs have seen, once.
/// #[derive(Clone)]
/// struct Both {
///     seen: ValueState<u8>,
/// }
///
/// impl Both {
///     fn saw(&self, side: u8, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         let before = self.seen.value(ctx)?.unwrap_or(0);
///         if before | side == 3 && before != 3 {
///             out.collect(*ctx.current_key());
///         }
///         Ok(self.seen.update(ctx, before | side)?)
///     }
/// }
///
/// impl KeyedCoProcessFunction<u64, u64, u64, u64> for Both {
///     fn process_element1(&mut self, _: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         self.saw(1, ctx, out)
///     }
///     fn process_element2(&mut self, _: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         self.saw(2, ctx, out)
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let left = env.from_collection(vec![1u64, 2, 3, 3]);
/// let right = env.from_collection(vec![3u64, 4, 2]);
/// let keyed: KeyedConnectedStreams<u64, u64, u64> = left.connect(&right).key_by(|v: &u64| *v, |v: &u64| *v);
/// let both = keyed.process(Both { seen: ValueState::new("seen") }).collect();
/// env.execute("both")?;
/// let mut both = both.take();
/// both.sort();
/// assert_eq!(both, vec![2, 3]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedConnectedStreams<A, B, K> {
    first: DataStream<A>,
    second: DataStream<B>,
    first_selector: Arc<dyn KeySelector<A, Key = K>>,
    second_selector: Arc<dyn KeySelector<B, Key = K>>,
    _key: PhantomData<fn() -> K>,
}

impl<A: Record, B: Record, K: Key> KeyedConnectedStreams<A, B, K> {
    /// Connects two streams already keyed alike.
    pub(crate) fn from_keyed(first: KeyedStream<A, K>, second: KeyedStream<B, K>) -> Self {
        Self {
            first_selector: first.selector(),
            second_selector: second.selector(),
            first: first.into_stream(),
            second: second.into_stream(),
            _key: PhantomData,
        }
    }

    /// Runs a [`KeyedCoProcessFunction`]: keyed state and timers shared by both inputs.
    pub fn process<O, P>(&self, function: P) -> DataStream<O>
    where
        O: Record,
        P: KeyedCoProcessFunction<K, A, B, O>,
    {
        let (first_key, second_key) = (self.first_selector.clone(), self.second_selector.clone());
        add_two_input_operator(
            &self.first,
            &self.second,
            "Keyed Co-Process",
            true,
            move |setup| {
                Ok(KeyedCoProcessOperator::new(
                    setup,
                    first_key.clone(),
                    second_key.clone(),
                    function.clone(),
                )?)
            },
        )
    }
}

#[derive(Clone)]
struct CoMap<F1, F2> {
    first: F1,
    second: F2,
}

impl<A, B, O, F1, F2> CoProcessFunction<A, B, O> for CoMap<F1, F2>
where
    F1: FnMut(A) -> O + Clone + Send + 'static,
    F2: FnMut(B) -> O + Clone + Send + 'static,
{
    fn process_element1(
        &mut self,
        value: A,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        out.collect((self.first)(value));
        Ok(())
    }
    fn process_element2(
        &mut self,
        value: B,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        out.collect((self.second)(value));
        Ok(())
    }
}

#[derive(Clone)]
struct CoFlatMap<F1, F2> {
    first: F1,
    second: F2,
}

impl<A, B, O, F1, F2> CoProcessFunction<A, B, O> for CoFlatMap<F1, F2>
where
    F1: FnMut(A, &mut Collector<'_, O>) + Clone + Send + 'static,
    F2: FnMut(B, &mut Collector<'_, O>) + Clone + Send + 'static,
{
    fn process_element1(
        &mut self,
        value: A,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        (self.first)(value, out);
        Ok(())
    }
    fn process_element2(
        &mut self,
        value: B,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        (self.second)(value, out);
        Ok(())
    }
}
