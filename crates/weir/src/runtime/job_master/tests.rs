//! The JobManager's decisions, driven step by step with a clock the test moves and
//! executors that only record what they are told: nothing sleeps, nothing runs a task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use super::{JobCommand, JobMaster, JobPhase, ManualClock};
use crate::checkpoint::restart_strategy::RestartStrategyConfig;
use crate::error::TaskError;
use crate::graph::execution_graph::SubtaskRef;
use crate::prelude::*;
use crate::runtime::deployment::DeployError;
use crate::runtime::task::{TaskControl, TaskEvent};
use crate::runtime::task_executors::{DeployedRun, RunRequest, TaskExecutors};

/// What the fake executors were asked to do.
#[derive(Default)]
struct Recorded {
    /// Each run's event line (to report as its tasks).
    runs: Vec<Sender<TaskEvent>>,
    /// Whether each run was asked to trace record origins.
    traced: Vec<bool>,
    /// Controls broadcast to the runs' tasks.
    controls: Vec<TaskControl>,
    /// Cancellations.
    cancels: u32,
    /// Slots offered (`None`: unlimited).
    slots: Option<u32>,
    /// Runs deploy in the background (a `Deployed` event follows), as on TaskManagers.
    deploys_later: bool,
}

#[derive(Clone, Default)]
struct FakeExecutors(Arc<Mutex<Recorded>>);

impl FakeExecutors {
    fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.0.lock().unwrap()
    }
}

impl TaskExecutors for FakeExecutors {
    fn start_run(&mut self, request: RunRequest<'_>) -> Result<Box<dyn DeployedRun>, DeployError> {
        self.recorded().runs.push(request.events);
        self.recorded().traced.push(request.trace_record_origins);
        let deployed = !self.recorded().deploys_later;
        Ok(Box::new(FakeRun(self.0.clone(), deployed)))
    }

    fn offered_slots(&self) -> Option<u32> {
        self.recorded().slots
    }

    fn slot_timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(30))
    }
}

struct FakeRun(Arc<Mutex<Recorded>>, bool);

impl DeployedRun for FakeRun {
    fn broadcast(&self, control: TaskControl) {
        self.0.lock().unwrap().controls.push(control);
    }
    fn cancel(&mut self) {
        self.0.lock().unwrap().cancels += 1;
    }
    fn join(self: Box<Self>) {}
    fn is_deployed(&self) -> bool {
        self.1
    }
}

struct Harness {
    master: JobMaster,
    executors: FakeExecutors,
    clock: ManualClock,
    commands: Sender<JobCommand>,
    tasks: Vec<SubtaskRef>,
}

/// A two-vertex job (a collection → a keyed count → a discarding sink) at parallelism 2,
/// restarting up to 3 times after 10 s.
fn harness(slots: Option<u32>) -> Harness {
    harness_with(slots, |c| c)
}

fn harness_with(
    slots: Option<u32>,
    configure: impl FnOnce(ExecutionConfig) -> ExecutionConfig,
) -> Harness {
    let env = StreamExecutionEnvironment::new(configure(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_restart_strategy(RestartStrategyConfig::FixedDelay {
                attempts: 3,
                delay: Duration::from_secs(10),
            }),
    ))
    .unwrap();
    env.from_collection(vec![1u64, 2, 3])
        .key_by(|x: &u64| *x)
        .count()
        .sink_to(DiscardingSink, "discard");
    let job = env.definition("phases").unwrap();
    let tasks = job
        .plan
        .execution_graph
        .vertices
        .iter()
        .map(|v| v.id)
        .collect();
    let executors = FakeExecutors::default();
    executors.recorded().slots = slots;
    let clock = ManualClock::new();
    let (commands, inbox) = crossbeam_channel::unbounded();
    let master = JobMaster::for_test(
        job,
        inbox,
        Box::new(executors.clone()),
        Box::new(clock.clone()),
    )
    .unwrap();
    Harness {
        master,
        executors,
        clock,
        commands,
        tasks,
    }
}

impl Harness {
    /// Handles whatever is waiting, without blocking.
    fn settle(&mut self) {
        for _ in 0..50 {
            self.master.step(None);
        }
    }

    /// The latest run's tasks report `event` for each task.
    fn report_all(&self, event: impl Fn(SubtaskRef) -> TaskEvent) {
        let recorded = self.executors.recorded();
        let run = recorded.runs.last().unwrap();
        for task in &self.tasks {
            run.send(event(*task)).unwrap();
        }
    }

    fn runs(&self) -> usize {
        self.executors.recorded().runs.len()
    }
}

/// A harness whose job checkpoints every second (in memory).
fn checkpointing_harness() -> Harness {
    harness_with(None, |c| {
        c.with_checkpointing(CheckpointConfig::default().with_interval(Duration::from_secs(1)))
    })
}

/// Every task of the latest run fails with `message`.
fn fail_all(h: &Harness, message: &str) {
    h.report_all(|task| TaskEvent::Failed {
        task,
        error: TaskError::Internal(message.to_string()),
        metrics: Vec::new(),
    });
}

fn cancelled(task: SubtaskRef) -> TaskEvent {
    TaskEvent::Failed {
        task,
        error: TaskError::Cancelled,
        metrics: Vec::new(),
    }
}

#[test]
fn a_failure_waits_out_the_back_off_on_the_clock_then_restarts() {
    let mut h = harness(None);
    h.master.try_deploy();
    assert!(matches!(h.master.phase(), JobPhase::Running));
    assert_eq!(h.runs(), 1);
    let failing = h.tasks[0];
    h.executors.recorded().runs[0]
        .send(TaskEvent::Failed {
            task: failing,
            error: TaskError::Internal("boom".into()),
            metrics: Vec::new(),
        })
        .unwrap();
    h.settle();
    assert!(
        matches!(h.master.phase(), JobPhase::Failing { .. }),
        "{}",
        h.master.phase().name()
    );
    assert!(
        h.executors.recorded().cancels >= 1,
        "the run was not cancelled"
    );
    h.report_all(cancelled);
    h.settle();
    assert!(
        matches!(h.master.phase(), JobPhase::Restarting { .. }),
        "{}",
        h.master.phase().name()
    );
    // Nine seconds later: still waiting, however many times the loop looks.
    h.clock.advance(Duration::from_secs(9));
    h.settle();
    assert_eq!(h.runs(), 1);
    assert!(matches!(h.master.phase(), JobPhase::Restarting { .. }));
    h.clock.advance(Duration::from_secs(2));
    h.settle();
    assert_eq!(h.runs(), 2, "no restart after the back-off");
    assert!(matches!(h.master.phase(), JobPhase::Running));
    assert_eq!(h.master.restart.restarts(), 1);
}

#[test]
fn a_cancel_during_the_back_off_ends_the_job_without_a_new_run() {
    let mut h = harness(None);
    h.master.try_deploy();
    fail_all(&h, "boom");
    h.settle();
    assert!(matches!(h.master.phase(), JobPhase::Restarting { .. }));
    h.commands.send(JobCommand::Cancel).unwrap();
    h.settle();
    h.clock.advance(Duration::from_secs(60));
    h.settle();
    assert_eq!(h.runs(), 1, "a cancelled job restarted");
    let outcome = h.master.outcome.take().expect("the job ended");
    assert_eq!(outcome.unwrap().status, JobStatus::Cancelled);
}

#[test]
fn too_few_slots_wait_then_fail_over_after_the_slot_timeout() {
    let mut h = harness(Some(1));
    h.master.try_deploy();
    h.settle();
    assert!(matches!(
        h.master.phase(),
        JobPhase::WaitingForResources { .. }
    ));
    assert_eq!(h.runs(), 0);
    h.clock.advance(Duration::from_secs(29));
    h.settle();
    assert!(matches!(
        h.master.phase(),
        JobPhase::WaitingForResources { .. }
    ));
    // The timeout passes: a failure, for the restart strategy.
    h.clock.advance(Duration::from_secs(2));
    h.settle();
    assert!(
        matches!(h.master.phase(), JobPhase::Restarting { .. }),
        "{}",
        h.master.phase().name()
    );
    // Slots appear during the back-off: the next run deploys once it is over.
    h.executors.recorded().slots = Some(2);
    h.clock.advance(Duration::from_secs(10));
    h.settle();
    assert_eq!(h.runs(), 1);
    assert!(matches!(h.master.phase(), JobPhase::Running));
}

#[test]
fn the_restart_strategy_gives_up_with_the_cause() {
    let mut h = harness(None);
    h.master.try_deploy();
    for attempt in 0..4 {
        fail_all(&h, &format!("boom {attempt}"));
        h.settle();
        h.clock.advance(Duration::from_secs(11));
        h.settle();
    }
    assert_eq!(h.runs(), 4, "three restarts");
    let error = h.master.outcome.take().expect("the job ended").unwrap_err();
    assert!(error.to_string().contains("boom 3"), "{error}");
}

#[test]
fn savepoints_are_refused_while_the_job_restarts() {
    let mut h = harness(None);
    h.master.try_deploy();
    fail_all(&h, "boom");
    h.settle();
    let (reply, answer) = crossbeam_channel::bounded(1);
    h.commands
        .send(JobCommand::TriggerSavepoint(reply))
        .unwrap();
    h.settle();
    let error = answer.try_recv().unwrap().unwrap_err();
    assert!(error.to_string().contains("restarting"), "{error}");
}

#[test]
fn periodic_checkpoints_start_and_expire_on_the_clock() {
    let mut h = harness_with(None, |c| {
        c.with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(1))
                .with_timeout(Duration::from_secs(5))
                .with_tolerable_failures(10),
        )
    });
    h.master.try_deploy();
    h.settle();
    assert!(h.master.coordinator.pending_ids().is_empty());
    h.clock.advance(Duration::from_millis(1100));
    h.settle();
    let pending = h.master.coordinator.pending_ids();
    assert_eq!(pending.len(), 1, "no checkpoint after the interval");
    // Nobody acknowledges: it expires five seconds later, and the tasks hear of it.
    h.clock.advance(Duration::from_millis(4_000));
    h.settle();
    assert_eq!(h.master.coordinator.pending_ids(), pending);
    h.clock.advance(Duration::from_millis(1_100));
    h.settle();
    assert!(!h.master.coordinator.pending_ids().contains(&pending[0]));
    assert_eq!(h.master.coordinator.history().failed, 1);
    assert!(h
        .executors
        .recorded()
        .controls
        .contains(&TaskControl::Notify(
            crate::runtime::snapshot::CheckpointNotification::Aborted(pending[0])
        )));
    assert!(matches!(h.master.phase(), JobPhase::Running));
}

#[test]
fn a_savepoint_asked_while_a_checkpoint_starts_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().to_path_buf();
    let mut h = harness_with(None, move |c| {
        c.with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(1))
                .with_storage(CheckpointStorageConfig::directory(&storage)),
        )
    });
    h.master.try_deploy();
    h.settle();
    h.clock.advance(Duration::from_millis(1100));
    // One step: the periodic checkpoint's location is being created (its reply waits).
    h.master.step(None);
    assert!(h.master.preparing.is_some());
    let (reply, _answer) = crossbeam_channel::bounded(1);
    h.commands
        .send(JobCommand::TriggerSavepoint(reply))
        .unwrap();
    h.settle();
    // Both started, in order: the checkpoint, then the savepoint.
    let pending = h.master.coordinator.pending_ids();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(h.master.savepoint_waiters.contains_key(&pending[1]));
    assert!(h.master.preparing.is_none() && h.master.queued.is_empty());
}

#[test]
fn no_checkpoint_starts_before_every_task_is_deployed_and_a_failed_deployment_restarts() {
    let mut h = checkpointing_harness();
    h.executors.recorded().deploys_later = true;
    h.master.try_deploy();
    h.settle();
    assert!(matches!(h.master.phase(), JobPhase::Deploying { .. }));
    h.clock.advance(Duration::from_secs(5));
    h.settle();
    assert!(
        h.master.coordinator.pending_ids().is_empty(),
        "a checkpoint before deployment"
    );
    h.executors.recorded().runs[0]
        .send(TaskEvent::Deployed)
        .unwrap();
    h.settle();
    assert!(matches!(h.master.phase(), JobPhase::Running));
    h.clock.advance(Duration::from_millis(1100));
    h.settle();
    assert_eq!(h.master.coordinator.pending_ids().len(), 1);
    // The next run: one TaskManager cannot deploy its half.
    let tasks = h.tasks.clone();
    fail_all(&h, "boom");
    h.settle();
    h.clock.advance(Duration::from_secs(11));
    h.settle();
    assert_eq!(h.runs(), 2);
    assert!(matches!(h.master.phase(), JobPhase::Deploying { .. }));
    h.executors.recorded().runs[1]
        .send(TaskEvent::DeployFailed {
            tasks: tasks[..2].to_vec(),
            taskmanager: "tm-2".into(),
            reason: "cannot connect to tm-1".into(),
            kind: crate::runtime::task::DeployFailureKind::Retriable,
        })
        .unwrap();
    h.settle();
    assert!(
        matches!(h.master.phase(), JobPhase::Failing { .. }),
        "{}",
        h.master.phase().name()
    );
    // The other half is cancelled; the run ends and a restart follows.
    let run = h.executors.recorded().runs[1].clone();
    for task in &tasks[2..] {
        run.send(cancelled(*task)).unwrap();
    }
    h.settle();
    assert!(
        matches!(h.master.phase(), JobPhase::Restarting { .. }),
        "{}",
        h.master.phase().name()
    );
}

#[test]
fn input_that_ends_while_the_run_deploys_still_gets_its_final_checkpoint() {
    let mut h = checkpointing_harness();
    h.executors.recorded().deploys_later = true;
    h.master.try_deploy();
    h.settle();
    let sources: Vec<SubtaskRef> = h
        .tasks
        .iter()
        .copied()
        .filter(|t| h.master.job.plan.job_graph.vertices[t.vertex.index()].is_source)
        .collect();
    let run = h.executors.recorded().runs[0].clone();
    for task in sources {
        run.send(TaskEvent::EndOfInput { task }).unwrap();
    }
    h.settle();
    assert!(matches!(h.master.phase(), JobPhase::Deploying { .. }));
    run.send(TaskEvent::Deployed).unwrap();
    h.settle();
    assert!(
        matches!(
            h.master.phase(),
            JobPhase::Finishing {
                final_checkpoint: Some(_)
            }
        ),
        "{}",
        h.master.phase().name()
    );
}

#[test]
fn a_restore_point_resolved_after_a_cancel_neither_restarts_nor_fails_the_job() {
    use super::store_io::StoreReply;
    use crate::checkpoint::storage::StorageError;
    let unreadable = || {
        WeirError::Storage(StorageError::Io {
            action: "reading",
            path: "chk-3/_metadata".into(),
            source: std::io::Error::other("injected"),
        })
    };
    let unusable = || WeirError::Restore {
        checkpoint_id: 3,
        reason: "damaged".into(),
    };
    for late in [unreadable(), unusable()] {
        let mut h = harness(None);
        h.master.try_deploy();
        fail_all(&h, "boom");
        h.settle();
        h.clock.advance(Duration::from_secs(11));
        // The back-off is over: the worker resolves while the user cancels.
        h.master.resolve_restart();
        h.commands.send(JobCommand::Cancel).unwrap();
        h.settle();
        h.master.on_store_reply(StoreReply::Resolved {
            result: Err(late),
            bad: Default::default(),
            notes: Vec::new(),
        });
        h.clock.advance(Duration::from_secs(60));
        h.settle();
        assert_eq!(h.runs(), 1, "a cancelled job restarted");
        assert!(matches!(h.master.phase(), JobPhase::Ended));
        let outcome = h.master.outcome.take().expect("the job ended");
        assert_eq!(outcome.unwrap().status, JobStatus::Cancelled);
    }
}

/// The sources' end of input, then a task's panic before the final checkpoint starts: that
/// checkpoint cannot be taken, but the attempt's error is the panic (which the restart strategy sees,
/// and which makes the next run trace record origins), not the refused checkpoint.
#[test]
fn a_run_failing_when_its_input_ends_reports_the_failure_and_traces_the_next_run() {
    let mut h = checkpointing_harness();
    h.master.try_deploy();
    h.settle();
    let (sources, others): (Vec<SubtaskRef>, Vec<SubtaskRef>) = h
        .tasks
        .iter()
        .copied()
        .partition(|t| h.master.job.plan.job_graph.vertices[t.vertex.index()].is_source);
    let run = h.executors.recorded().runs[0].clone();
    // The input ends, the final checkpoint is asked for, and a task fails before it starts.
    for task in &sources {
        run.send(TaskEvent::EndOfInput { task: *task }).unwrap();
    }
    run.send(TaskEvent::Failed {
        task: others[0],
        error: TaskError::UserPanic {
            message: "poison".into(),
        },
        metrics: Vec::new(),
    })
    .unwrap();
    h.settle();
    for task in sources.iter().chain(&others[1..]) {
        run.send(cancelled(*task)).unwrap();
    }
    h.settle();
    h.clock.advance(Duration::from_secs(11));
    h.settle();
    let first = h
        .master
        .exceptions
        .front()
        .map(|e| e.exception.clone())
        .unwrap_or_default();
    assert!(
        first.contains("poison"),
        "the attempt failed with {first:?}"
    );
    assert_eq!(h.executors.recorded().traced, [false, true]);
}

/// The run after a user-code failure traces record origins for twice as long as the failed
/// run lived (at least ten seconds), then tells its tasks to stop.
#[test]
fn a_run_after_a_user_failure_traces_origins_for_twice_the_failed_runs_life() {
    let mut h = harness(None);
    h.master.try_deploy();
    h.settle();
    h.clock.advance(Duration::from_secs(30));
    h.settle();
    h.report_all(|task| TaskEvent::Failed {
        task,
        error: TaskError::UserPanic {
            message: "poison".into(),
        },
        metrics: Vec::new(),
    });
    h.settle();
    h.clock.advance(Duration::from_secs(11));
    h.settle();
    assert_eq!(h.executors.recorded().traced, [false, true]);
    let stops = |h: &Harness| {
        h.executors
            .recorded()
            .controls
            .iter()
            .filter(|c| **c == TaskControl::StopTracingOrigins)
            .count()
    };
    h.clock.advance(Duration::from_secs(59));
    h.settle();
    assert_eq!(stops(&h), 0, "tracing stopped before the window ended");
    h.clock.advance(Duration::from_secs(2));
    h.settle();
    assert_eq!(stops(&h), 1, "tracing did not stop after the window");
    h.clock.advance(Duration::from_secs(120));
    h.settle();
    assert_eq!(stops(&h), 1, "told more than once");
    assert_eq!(
        super::attempt::tracing_window(Duration::from_secs(1)),
        super::attempt::MIN_TRACING
    );
}

/// A run fails; while the job waits to restart, the worker's fencing check for one of that
/// run's checkpoints finds the job lost (its reply comes after the run's end). The job stops
/// with that error at once, instead of waiting in a `Failing` phase for a run that is not
/// there (the process hung until killed). A check that could not be made is not final: the
/// restart goes on.
#[test]
fn a_job_lost_between_runs_stops_and_a_failed_check_between_runs_restarts() {
    use crate::checkpoint::fencing::FencedError;
    let lost = FencedError::LockLost {
        job: "phases".into(),
        epoch: 1,
        lock: "chk/_lock".into(),
    };
    let unverifiable = FencedError::Unverifiable {
        job: "phases".into(),
        epoch: 1,
        reason: "injected".into(),
    };
    for (fenced, stops) in [(lost, true), (unverifiable, false)] {
        let mut h = harness(None);
        h.master.try_deploy();
        fail_all(&h, "boom");
        h.settle();
        assert!(matches!(h.master.phase(), JobPhase::Restarting { .. }));
        h.master.fail_run(WeirError::Fenced(fenced.clone()));
        h.clock.advance(Duration::from_secs(11));
        h.settle();
        if stops {
            assert_eq!(h.runs(), 1, "a process that lost its job restarted it");
            assert!(matches!(h.master.phase(), JobPhase::Ended));
            match h.master.outcome.take() {
                Some(Err(WeirError::Fenced(f))) => assert_eq!(f, fenced),
                other => panic!("the job did not stop with the fence: {other:?}"),
            }
        } else {
            assert_eq!(h.runs(), 2, "no restart after a failed check between runs");
            assert!(matches!(h.master.phase(), JobPhase::Running));
        }
    }
}
