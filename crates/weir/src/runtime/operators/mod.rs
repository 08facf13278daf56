//! Stream operators, one per file, and the hooks they implement ([`StreamOperator`],
//! [`OneInputStreamOperator`]). The chain node around each operator does the plumbing they
//! share: batches, the output over the successors, record counts.

pub mod co_process;
pub mod filter;
pub mod flat_map;
pub(crate) mod keyed_harness;
pub mod keyed_process;
pub mod map;
pub mod process;
pub(crate) mod rolling_aggregate;
pub mod sink_writer;
pub mod timestamps_and_watermarks;
pub mod window;

use std::sync::Arc;

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::checkpoint::config::CheckpointingMode;
use crate::error::{BoxError, StateError, TaskError};
use crate::graph::ids::NodeId;
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::output::{call_user, in_operator, user_error};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{CheckpointBarrier, InputEnd};
use crate::runtime::task::OperatorSetup;
use crate::state::backend::KeyedBackendSnapshot;
use crate::state::backend_factory::{
    file_name_of, remove_dead_working_dirs, state_backend_factory, BackendContext,
};
use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;
use crate::state::keyed_state_store::KeyedStateStore;
use crate::state::operator_state::OperatorStateBackend;
use crate::state::serialized_keyed_state::SerializedKeyedState;
use crate::time::Watermark;

/// The identity shared by every operator.
#[derive(Debug, Clone)]
pub struct OperatorCore {
    /// The operator.
    pub node: NodeId,
    /// Its name, for errors.
    pub name: Arc<str>,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// What user functions see of the subtask.
    pub runtime: RuntimeContext,
}

impl OperatorCore {
    /// The core of the operator set up by `setup`.
    pub fn new(setup: &OperatorSetup) -> Self {
        Self {
            node: setup.node,
            name: setup.name.clone(),
            subtask: setup.subtask,
            runtime: RuntimeContext::of(setup),
        }
    }

    /// The operator state backend of `setup`'s subtask, with restored lists if any.
    pub fn operator_state(setup: &OperatorSetup) -> OperatorStateBackend {
        match &setup.restored {
            Some(restored) => OperatorStateBackend::new(restored.lists.clone(), true),
            None => OperatorStateBackend::default(),
        }
    }

    /// The keyed state of `setup`'s subtask, in the backend the job configures, with
    /// restored key groups if any.
    pub fn keyed_backend<K: Key>(setup: &OperatorSetup) -> Result<KeyedStateStore<K>, TaskError> {
        let restored = setup
            .restored
            .as_ref()
            .map(|r| r.keyed.clone())
            .unwrap_or_default();
        let restored_files = setup
            .restored
            .as_ref()
            .map_or(&[][..], |r| r.keyed_files.as_slice());
        let config = &setup.config.state_backend;
        if let Some(files) = restored_files
            .iter()
            .find(|f| f.handle.backend != config.backend_type)
        {
            return Err(in_operator(
                &setup.name,
                StateError::IncompatibleSnapshot {
                    written_by: files.handle.backend.clone(),
                    configured: config.backend_type.clone(),
                }
                .into(),
            ));
        }
        if config.is_heap() {
            let mut backend = HeapKeyedStateBackend::new(setup.max_parallelism, setup.key_groups);
            backend.restore(restored)?;
            return Ok(KeyedStateStore::Heap(backend));
        }
        let factory = state_backend_factory(&config.backend_type)?;
        remove_dead_working_dirs(&config.working_root());
        // Unique per operator subtask and process run: a restarted attempt starts afresh
        // from what it restores.
        let working_dir = config.working_root().join(format!(
            "{}-{}-{}-{}",
            file_name_of(&setup.uid),
            setup.subtask,
            std::process::id(),
            NEXT_WORKING_DIR.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let backend = factory
            .create(BackendContext {
                operator_uid: &setup.uid,
                subtask: setup.subtask,
                key_groups: setup.key_groups,
                max_parallelism: setup.max_parallelism,
                config,
                working_dir: &working_dir,
                restored,
                restored_files,
            })
            .map_err(|e| in_operator(&setup.name, e.into()))?;
        Ok(KeyedStateStore::Serialized(SerializedKeyedState::new(
            backend,
            setup.max_parallelism,
        )))
    }
}

/// Numbers the working directories of disk backends within this process.
static NEXT_WORKING_DIR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The hooks every operator has, driven by the task over its
/// [`OperatorChain`](crate::runtime::chain::OperatorChain) (Flink's `StreamOperator`).
pub trait StreamOperator: Send {
    /// Called once on the task thread before the first record, after the operators behind
    /// it in the chain are open: restore state and open user functions here.
    fn open(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    /// The synchronous part of checkpoint `checkpoint_id`: appends the operator's frozen
    /// state.
    fn snapshot_state(
        &mut self,
        _barrier: CheckpointBarrier,
        _into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// A checkpoint completed or was aborted.
    fn notify_checkpoint(
        &mut self,
        _notification: CheckpointNotification,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// Adds what the operator counts itself to its metrics.
    fn add_metrics(&self, _metrics: &mut crate::runtime::output::OperatorMetrics) {}
    /// The stream has ended (after the end of input and the final checkpoint, if any):
    /// releases resources.
    fn close(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
}

/// An operator with one input of records `I`, emitting records `O` (Flink's
/// `OneInputStreamOperator`). What it emits goes to a [`ChainOutput`] of records and
/// watermarks; the chain node around it does the batching and counting.
pub trait OneInputStreamOperator<I, O>: StreamOperator {
    /// Processes one record.
    fn process_element(&mut self, record: I, out: &mut ChainOutput<'_, O>)
        -> Result<(), TaskError>;
    /// Processes one record whose key group its sender computed (it came through a hash
    /// partitioner, which carries each record's key group in the batch): a keyed operator
    /// finds its state without serializing and hashing its key again. Others ignore it.
    #[inline]
    fn process_element_in_key_group(
        &mut self,
        record: I,
        _key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.process_element(record, out)
    }
    /// Processes a watermark: by default passes it on.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError>
    where
        O: Record,
    {
        out.emit_watermark(watermark)
    }
    /// The earliest processing time (milliseconds since the Unix epoch) at which the
    /// operator has a timer to fire.
    fn next_processing_time(&self) -> Option<i64> {
        None
    }
    /// The wall clock reached `time`: fire the processing-time timers due.
    fn on_processing_time(
        &mut self,
        _time: i64,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// The input has ended: emit what is still held (Flink's `BoundedOneInput::endInput`).
    fn end_input(
        &mut self,
        _cause: InputEnd,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// Work before a checkpoint's barrier leaves the task; what is emitted here belongs to
    /// the checkpoint.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint_id: u64,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
}

/// An operator with two inputs of records `I1` and `I2`, emitting records `O` (Flink's
/// `TwoInputStreamOperator`): the operator of a connected stream. Its watermark is the
/// minimum over both inputs' channels; barriers align across both; its input ends when both
/// have.
pub trait TwoInputStreamOperator<I1, I2, O>: StreamOperator {
    /// Processes one record of the first input.
    fn process_element1(
        &mut self,
        record: I1,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError>;
    /// Processes one record of the second input.
    fn process_element2(
        &mut self,
        record: I2,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError>;
    /// Processes one record of the first input whose key group its sender computed (see
    /// [`OneInputStreamOperator::process_element_in_key_group`]).
    #[inline]
    fn process_element1_in_key_group(
        &mut self,
        record: I1,
        _key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.process_element1(record, out)
    }
    /// Processes one record of the second input whose key group its sender computed.
    #[inline]
    fn process_element2_in_key_group(
        &mut self,
        record: I2,
        _key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.process_element2(record, out)
    }
    /// Processes a watermark: by default passes it on.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError>
    where
        O: Record,
    {
        out.emit_watermark(watermark)
    }
    /// The earliest processing time at which the operator has a timer to fire.
    fn next_processing_time(&self) -> Option<i64> {
        None
    }
    /// The wall clock reached `time`: fire the processing-time timers due.
    fn on_processing_time(
        &mut self,
        _time: i64,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// Both inputs have ended.
    fn end_input(
        &mut self,
        _cause: InputEnd,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    /// Work before a checkpoint's barrier leaves the task.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint_id: u64,
        _out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
}

/// The `StreamOperator` lifecycle of an operator running a user function with operator
/// state (fields `core`, `operator_state`, `end_of_input`, `function`; the function has
/// Flink's `initialize_state`, `open`, `snapshot_state` and checkpoint-notification hooks).
macro_rules! function_lifecycle {
    () => {
        fn open(&mut self) -> Result<(), $crate::error::TaskError> {
            self.end_of_input = $crate::runtime::operators::EndOfInput::restore(
                &self.core,
                &mut self.operator_state,
            )?;
            let (function, core) = (&mut self.function, &self.core);
            $crate::runtime::operators::state_hook(core, &mut self.operator_state, None, |ctx| {
                function.initialize_state(ctx)
            })?;
            $crate::runtime::operators::call_hook(&core.name, || function.open(&core.runtime))
        }

        fn snapshot_state(
            &mut self,
            barrier: $crate::runtime::stream_element::CheckpointBarrier,
            into: &mut Vec<$crate::runtime::snapshot::OperatorSnapshot>,
        ) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            $crate::runtime::operators::snapshot_operator(
                &self.core,
                &mut self.operator_state,
                barrier.checkpoint_id,
                None,
                into,
                |ctx| function.snapshot_state(ctx),
            )
        }

        fn notify_checkpoint(
            &mut self,
            notification: $crate::runtime::snapshot::CheckpointNotification,
        ) -> Result<(), $crate::error::TaskError> {
            $crate::runtime::operators::notify_hook(
                &self.core.name,
                notification,
                &mut self.function,
                |f, id| f.notify_checkpoint_complete(id),
                |f, id| f.notify_checkpoint_aborted(id),
            )
        }
    };
}
pub(crate) use function_lifecycle;

/// The `StreamOperator` lifecycle of an operator running a keyed user function (fields
/// `keyed: KeyedHarness<K>` and `function`).
macro_rules! keyed_function_lifecycle {
    () => {
        fn open(&mut self) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            self.keyed
                .initialize(|ctx| function.initialize_state(ctx))?;
            self.keyed.open(|runtime| function.open(runtime))
        }

        fn snapshot_state(
            &mut self,
            barrier: $crate::runtime::stream_element::CheckpointBarrier,
            into: &mut Vec<$crate::runtime::snapshot::OperatorSnapshot>,
        ) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            self.keyed
                .snapshot(barrier, into, |ctx| function.snapshot_state(ctx))
        }

        fn notify_checkpoint(
            &mut self,
            notification: $crate::runtime::snapshot::CheckpointNotification,
        ) -> Result<(), $crate::error::TaskError> {
            self.keyed.notify_backend(notification)?;
            $crate::runtime::operators::notify_hook(
                &self.keyed.core.name,
                notification,
                &mut self.function,
                |f, id| f.notify_checkpoint_complete(id),
                |f, id| f.notify_checkpoint_aborted(id),
            )
        }
    };
}
pub(crate) use keyed_function_lifecycle;

/// The watermark, timer and end-of-input hooks of an operator running a keyed user function
/// with `on_timer` and `end_input` (fields `keyed: KeyedHarness<K>` and `function`), for
/// one-input and two-input operators alike.
macro_rules! keyed_function_timer_hooks {
    ($output:ty) => {
        fn process_watermark(
            &mut self,
            watermark: $crate::time::Watermark,
            out: &mut $crate::runtime::chain::ChainOutput<'_, $output>,
        ) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            self.keyed
                .advance_watermark(watermark.timestamp, out, |t, ctx, out| {
                    function.on_timer(t, ctx, out)
                })?;
            out.emit_watermark(watermark)
        }

        fn next_processing_time(&self) -> Option<i64> {
            self.keyed.next_processing_time()
        }

        fn on_processing_time(
            &mut self,
            time: i64,
            out: &mut $crate::runtime::chain::ChainOutput<'_, $output>,
        ) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            self.keyed.fire_timers(
                $crate::state::timers::TimeDomain::ProcessingTime,
                time,
                out,
                |t, ctx, out| function.on_timer(t, ctx, out),
            )
        }

        fn end_input(
            &mut self,
            _cause: $crate::runtime::stream_element::InputEnd,
            out: &mut $crate::runtime::chain::ChainOutput<'_, $output>,
        ) -> Result<(), $crate::error::TaskError> {
            let function = &mut self.function;
            self.keyed
                .end_input(out, |ctx, out| function.end_input(ctx, out))
        }
    };
}
pub(crate) use keyed_function_timer_hooks;

/// Operator list state that marks the subtasks of an operator whose input has ended: a job
/// restored from a checkpoint taken after that point (between the end of data and the final
/// checkpoint, or a drained savepoint) must not end the input a second time, or what
/// `end_input` emitted — already in the checkpoint's transactions — would be emitted twice
/// (Flink's `FINISHED_ON_RESTORE`). Union state, so that every subtask sees every old
/// subtask's mark.
const INPUT_ENDED_STATE: &str = "weir.input-ended";

/// One subtask's mark: whether its input had ended when the snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct InputEndedMark {
    subtask: u32,
    parallelism: u32,
    ended: bool,
}

/// Tracks whether an operator subtask has ended its input, across restores. Only in
/// exactly-once mode: without aligned barriers a snapshot can follow one channel's end of
/// data while another channel's records before the barrier are still to come, so a restore
/// ends the input again (at-least-once allows the repeat, not the loss).
#[derive(Debug, Default)]
pub(crate) struct EndOfInput {
    ended: bool,
}

impl EndOfInput {
    /// Reads the marks from restored operator state and writes this subtask's own.
    ///
    /// At the same parallelism a subtask takes its own old mark. Rescaled, the input has ended
    /// if every old subtask's had; if only some had, the restore is refused: ending the
    /// input again would repeat the output of those that had, not ending it would lose the
    /// others'.
    pub(crate) fn restore(
        core: &OperatorCore,
        state: &mut OperatorStateBackend,
    ) -> Result<Self, TaskError> {
        let exactly_once =
            core.runtime.execution_config().checkpoint.mode == CheckpointingMode::ExactlyOnce;
        let state_error = |e: crate::error::StateError| in_operator(&core.name, e.into());
        let marks: Vec<InputEndedMark> = state
            .get_union_list(INPUT_ENDED_STATE)
            .map_err(state_error)?;
        let parallelism = core.runtime.parallelism();
        let ended = if !exactly_once || marks.is_empty() {
            false
        } else if marks.iter().all(|m| m.parallelism == parallelism) {
            marks.iter().any(|m| m.subtask == core.subtask && m.ended)
        } else {
            let old_parallelism = marks[0].parallelism;
            let ended_old: std::collections::BTreeSet<u32> = marks
                .iter()
                .filter(|m| m.ended)
                .map(|m| m.subtask)
                .collect();
            if ended_old.is_empty() {
                false
            } else if ended_old.len() as u32 == old_parallelism {
                true
            } else {
                return Err(in_operator(
                    &core.name,
                    TaskError::Internal(format!(
                        "cannot restore at parallelism {parallelism}: the input had ended in \
                         {} of {old_parallelism} subtasks of this operator when the checkpoint \
                         was taken; restore it at parallelism {old_parallelism}",
                        ended_old.len()
                    )),
                ));
            }
        };
        let this = Self { ended };
        this.write_mark(core, state)?;
        Ok(this)
    }

    fn write_mark(
        &self,
        core: &OperatorCore,
        state: &mut OperatorStateBackend,
    ) -> Result<(), TaskError> {
        let mark = InputEndedMark {
            subtask: core.subtask,
            parallelism: core.runtime.parallelism(),
            ended: self.ended,
        };
        state
            .update_union_list(INPUT_ENDED_STATE, &[mark])
            .map_err(|e| in_operator(&core.name, e.into()))
    }

    /// Whether the input ends now: true the first time only (and never after a restore of a
    /// snapshot taken once it had ended); marks the operator state so that snapshots say so.
    pub(crate) fn ends_now(
        &mut self,
        core: &OperatorCore,
        state: &mut OperatorStateBackend,
    ) -> Result<bool, TaskError> {
        if self.ended {
            return Ok(false);
        }
        self.ended = true;
        self.write_mark(core, state)?;
        Ok(true)
    }
}

/// Runs a fallible user hook, attributing a panic or error to the operator.
pub(crate) fn call_hook(
    operator: &Arc<str>,
    f: impl FnOnce() -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    call_user(operator, f)?.map_err(|e| user_error(operator, e))
}

/// Delivers a checkpoint notification to a user function's `notify_checkpoint_complete` or
/// `notify_checkpoint_aborted` hook.
pub(crate) fn notify_hook<F>(
    operator: &Arc<str>,
    notification: CheckpointNotification,
    function: &mut F,
    complete: impl FnOnce(&mut F, u64) -> Result<(), BoxError>,
    aborted: impl FnOnce(&mut F, u64) -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    call_hook(operator, || match notification {
        CheckpointNotification::Complete(id) => complete(function, id),
        CheckpointNotification::Aborted(id) => aborted(function, id),
    })
}

/// Freezes the keyed state of an operator without a user function's state hooks.
pub(crate) fn snapshot_keyed<K: Key>(
    core: &OperatorCore,
    store: &mut KeyedStateStore<K>,
    barrier: CheckpointBarrier,
    into: &mut Vec<OperatorSnapshot>,
) -> Result<(), TaskError> {
    let keyed = store
        .snapshot(barrier)
        .map_err(|e| in_operator(&core.name, e.into()))?;
    into.push(OperatorSnapshot {
        node: core.node,
        keyed: Some(keyed),
        lists: Vec::new(),
    });
    Ok(())
}

/// Passes a checkpoint's completion or abort to an operator's keyed state backend (which
/// may then refer to what a completed checkpoint wrote, or must not to an aborted one's).
pub(crate) fn notify_keyed<K: Key>(
    core: &OperatorCore,
    store: &mut KeyedStateStore<K>,
    notification: CheckpointNotification,
) -> Result<(), TaskError> {
    store
        .notify(notification)
        .map_err(|e| in_operator(&core.name, e.into()))
}

/// Runs a user function's `snapshot_state` hook, then appends the operator's frozen state
/// (its operator lists, and `keyed` state if any).
pub(crate) fn snapshot_operator(
    core: &OperatorCore,
    state: &mut OperatorStateBackend,
    checkpoint_id: u64,
    keyed: Option<Box<dyn KeyedBackendSnapshot>>,
    into: &mut Vec<OperatorSnapshot>,
    hook: impl FnOnce(&mut FunctionStateContext<'_>) -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    state_hook(core, state, Some(checkpoint_id), hook)?;
    into.push(OperatorSnapshot {
        node: core.node,
        keyed,
        lists: state.snapshot(),
    });
    Ok(())
}

/// Runs a user state hook (`initialize_state` when `checkpoint_id` is `None`,
/// `snapshot_state` otherwise) with the operator's state and subtask.
pub(crate) fn state_hook(
    core: &OperatorCore,
    state: &mut OperatorStateBackend,
    checkpoint_id: Option<u64>,
    f: impl FnOnce(&mut FunctionStateContext<'_>) -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    call_hook(&core.name, || {
        f(&mut FunctionStateContext {
            operator_state: state,
            checkpoint_id,
            runtime: &core.runtime,
        })
    })
}
