//! Barrier alignment: in exactly-once mode, an operator with two inputs snapshots exactly the
//! records that precede the barrier on each input — its state always matches the sources'
//! checkpointed positions.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::WatermarkStrategy;

use weir::checkpoint::storage::{CheckpointStorage, FsCheckpointStorage};
use weir::connectors::generator::{GeneratorSource, NumberSequenceSplit};
use weir::runtime::source_task::READER_SPLITS_STATE;
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, ExecutionConfig,
    FunctionStateContext, ProcessContext, ProcessFunction, RetentionOnCancel,
    StreamExecutionEnvironment,
};

type Snapshots = Arc<Mutex<Vec<(u64, [u64; 2])>>>;

/// Counts records per input; records its counts at every snapshot.
#[derive(Clone)]
struct Tally {
    counts: [u64; 2],
    snapshots: Snapshots,
}

impl ProcessFunction<(usize, u64), ()> for Tally {
    fn process_element(
        &mut self,
        value: (usize, u64),
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_, ()>,
    ) -> Result<(), BoxError> {
        assert_eq!(
            value.1, self.counts[value.0],
            "records of one input arrive in order"
        );
        self.counts[value.0] += 1;
        // Slow the operator so that barriers queue behind records and alignment matters.
        if value.1.is_multiple_of(64) {
            std::thread::sleep(Duration::from_micros(300));
        }
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let id = ctx.checkpoint_id().ok_or("no id")?;
        self.snapshots.lock().unwrap().push((id, self.counts));
        Ok(())
    }
}

#[test]
fn two_input_operator_state_matches_source_positions_at_every_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_buffer_size(32)
        .with_channel_capacity(2)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(30))
                .with_retained(1000)
                .with_retention_on_cancel(RetentionOnCancel::Retain)
                .with_storage(CheckpointStorageConfig::FileSystem(
                    dir.path().to_path_buf(),
                )),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let fast = env
        .from_source(
            GeneratorSource::unbounded(|i| (0usize, i)).with_rate_limit(40_000.0),
            WatermarkStrategy::no_watermarks(),
            "fast",
        )
        .uid("fast");
    let slow = env
        .from_source(
            GeneratorSource::unbounded(|i| (1usize, i)).with_rate_limit(3_000.0),
            WatermarkStrategy::no_watermarks(),
            "slow",
        )
        .uid("slow");
    let snapshots: Snapshots = Arc::default();
    fast.union(&slow)
        .process(Tally {
            counts: [0, 0],
            snapshots: snapshots.clone(),
        })
        .uid("tally");
    let client = env.execute_async("alignment").unwrap();
    // Cancelled once five checkpoints completed, however long a loaded machine takes.
    common::await_checkpoints(&client, 5);
    let result = client.cancel().unwrap();
    assert!(result.checkpoints.completed >= 5, "{}", result.checkpoints);

    let storage = FsCheckpointStorage::new(dir.path(), "alignment").unwrap();
    let recorded = snapshots.lock().unwrap().clone();
    let mut compared = 0;
    for stored in storage
        .list_checkpoints()
        .unwrap()
        .into_iter()
        .filter(|c| c.has_metadata)
    {
        let metadata = storage.read_metadata(&stored.location).unwrap();
        let position = |uid: &str| -> u64 {
            let op = metadata.operator(uid).unwrap();
            let item = &op.subtasks[0]
                .lists
                .iter()
                .find(|l| l.name == READER_SPLITS_STATE)
                .unwrap()
                .items[0];
            let weir::checkpoint::metadata::ListItem::Inline(bytes) = item else {
                panic!("a reader position is small enough to be inline")
            };
            postcard::from_bytes::<NumberSequenceSplit>(bytes)
                .unwrap()
                .next
        };
        let counts = recorded
            .iter()
            .find(|(id, _)| *id == stored.id)
            .map(|(_, c)| *c)
            .unwrap();
        assert_eq!(
            counts,
            [position("fast"), position("slow")],
            "checkpoint {}: operator state and source positions disagree",
            stored.id
        );
        compared += 1;
    }
    assert!(compared >= 5, "only {compared} checkpoints compared");
}
