//! Tests of `recovery`.

use super::*;
use crate::runtime::stream_element::SnapshotType;

fn chk(id: u64) -> RecordedCheckpoint {
    RecordedCheckpoint::new(id, SnapshotType::Checkpoint, format!("/c/j/chk-{id}"))
}

fn record(completed: &[u64], status: RecordedStatus) -> PreviousRecord {
    let mut r = JobRecord::new("j");
    for id in completed {
        r.add_completed(chk(*id), 3);
    }
    r.status = status;
    PreviousRecord::Found(r)
}

fn sinks() -> Vec<String> {
    vec!["Sink: files".to_string()]
}

const REFUSE: CorruptCheckpointPolicy = CorruptCheckpointPolicy::Refuse;
const ALLOW: CorruptCheckpointPolicy = CorruptCheckpointPolicy::AllowDuplicates;

fn ctx(sinks: &[String], policy: CorruptCheckpointPolicy) -> RecoveryContext<'_> {
    RecoveryContext {
        job: "j",
        storage: "/c/j",
        sinks,
        policy,
    }
}

#[test]
fn resume_restores_the_newest_recorded_checkpoint_first() {
    let plan = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Resume,
        &record(&[4, 5, 6], RecordedStatus::Running),
        &[],
    )
    .unwrap();
    let StartPlan::Restore { candidates, note } = plan else {
        panic!("{plan:?}")
    };
    assert_eq!(candidates, vec![chk(6), chk(5), chk(4)]);
    assert_eq!(note, None);
}

#[test]
fn a_finished_job_is_not_resumed_and_a_stopped_one_resumes_from_its_savepoint() {
    let finished = record(
        &[7],
        RecordedStatus::Finished {
            final_checkpoint: Some(7),
        },
    );
    assert_eq!(
        plan_start(ctx(&sinks(), REFUSE), &StartMode::Resume, &finished, &[]),
        Ok(StartPlan::AlreadyFinished)
    );
    let PreviousRecord::Found(mut stopped) = record(&[3], RecordedStatus::Running) else {
        unreachable!()
    };
    let savepoint = RecordedCheckpoint::new(4, SnapshotType::Savepoint, "/c/j/savepoint-4");
    stopped.add_completed(savepoint.clone(), 3);
    stopped.status = RecordedStatus::Stopped {
        savepoint: 4,
        location: savepoint.location.clone(),
    };
    let plan = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Resume,
        &PreviousRecord::Found(stopped),
        &[],
    )
    .unwrap();
    assert!(
        matches!(&plan, StartPlan::Restore { candidates, .. } if candidates[0] == savepoint),
        "{plan:?}"
    );
}

#[test]
fn committed_output_without_a_restore_point_is_refused_unless_allowed() {
    let PreviousRecord::Found(mut emptied) = record(&[5], RecordedStatus::Running) else {
        unreachable!()
    };
    emptied.completed.clear();
    emptied.status = RecordedStatus::Cancelled {
        checkpoints_retained: false,
    };
    let previous = PreviousRecord::Found(emptied);
    let err = plan_start(ctx(&sinks(), REFUSE), &StartMode::Resume, &previous, &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cancelled and its checkpoints deleted"),
        "{err}"
    );
    assert!(
        err.contains(FALLBACK_OPTION) && err.contains("`Sink: files`"),
        "{err}"
    );
    let plan = plan_start(ctx(&sinks(), ALLOW), &StartMode::Resume, &previous, &[]).unwrap();
    assert!(
        matches!(&plan, StartPlan::Fresh { note: Some(n) } if n.contains("checkpoints 1..=5")),
        "{plan:?}"
    );
    // Only idempotent sinks: allowed, and said.
    let plan = plan_start(ctx(&[], REFUSE), &StartMode::Resume, &previous, &[]).unwrap();
    assert!(
        matches!(&plan, StartPlan::Fresh { note: Some(n) } if n.contains("idempotent")),
        "{plan:?}"
    );
}

#[test]
fn checkpoints_without_a_record_are_not_trusted_blindly() {
    let err = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Resume,
        &PreviousRecord::None,
        &[chk(2), chk(3)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, RecoveryError::NoRecord { checkpoints, .. } if checkpoints == &[2, 3]),
        "{err}"
    );
    let plan = plan_start(
        ctx(&sinks(), ALLOW),
        &StartMode::Resume,
        &PreviousRecord::None,
        &[chk(2), chk(3)],
    )
    .unwrap();
    assert!(
        matches!(&plan, StartPlan::Restore { candidates, .. } if candidates[0].id == 3),
        "{plan:?}"
    );
    assert_eq!(
        plan_start(
            ctx(&sinks(), REFUSE),
            &StartMode::Resume,
            &PreviousRecord::None,
            &[]
        ),
        Ok(StartPlan::Fresh { note: None })
    );
    let err = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Resume,
        &PreviousRecord::Unreadable("checksum mismatch".into()),
        &[chk(2)],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("job record is unreadable (checksum mismatch)"),
        "{err}"
    );
}

#[test]
fn restoring_a_path_older_than_committed_output_is_refused_unless_allowed() {
    let previous = record(&[8, 9], RecordedStatus::Running);
    let older = StartMode::RestoreFrom {
        path: "/s/savepoint-5".into(),
        id: 5,
    };
    let err = plan_start(ctx(&sinks(), REFUSE), &older, &previous, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoints 6..=9 a second time"), "{err}");
    assert!(plan_start(ctx(&sinks(), ALLOW), &older, &previous, &[]).is_ok());
    // Nothing known of what was committed: refused as well.
    let unreadable = PreviousRecord::Unreadable("checksum mismatch".into());
    assert!(matches!(
        plan_start(ctx(&sinks(), REFUSE), &older, &unreadable, &[]),
        Err(RecoveryError::RecordUnreadable { .. })
    ));
    assert!(plan_start(ctx(&[], REFUSE), &older, &previous, &[]).is_ok());
    let newest = StartMode::RestoreFrom {
        path: "/s/savepoint-9".into(),
        id: 9,
    };
    assert!(plan_start(ctx(&sinks(), REFUSE), &newest, &previous, &[]).is_ok());
}

#[test]
fn a_fresh_start_over_an_earlier_run_is_refused_and_names_the_ways_on() {
    for previous in [
        record(&[3], RecordedStatus::Running),
        record(
            &[],
            RecordedStatus::Finished {
                final_checkpoint: None,
            },
        ),
        PreviousRecord::Unreadable("checksum mismatch".into()),
    ] {
        let err = plan_start(ctx(&sinks(), REFUSE), &StartMode::Fresh, &previous, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("job `j` ran here before: `/c/j` holds")
                && err.contains("`Sink: files`")
                && err.contains("with_resume_from_latest_checkpoint")
                && err.contains("execution.start-mode: resume")
                && err.contains("weir run --resume")
                && err.contains("execution.savepoint.path")
                && err.contains("weir reset /c/j"),
            "{err}"
        );
    }
    let err = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Fresh,
        &record(&[3], RecordedStatus::Running),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("newest restore point checkpoint 3"), "{err}");
    let err = plan_start(
        ctx(&sinks(), REFUSE),
        &StartMode::Fresh,
        &PreviousRecord::None,
        &[chk(4)],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("checkpoints [4] but no job record"), "{err}");
    // Allowed, and said, with only idempotent sinks or the override.
    for sinks in [&[][..], &sinks()[..]] {
        let policy = if sinks.is_empty() { REFUSE } else { ALLOW };
        let plan = plan_start(
            ctx(sinks, policy),
            &StartMode::Fresh,
            &record(&[3], RecordedStatus::Running),
            &[],
        )
        .unwrap();
        assert!(
            matches!(&plan, StartPlan::Fresh { note: Some(n) } if n.contains("ran here before")),
            "{plan:?}"
        );
    }
}

#[test]
fn a_fresh_start_after_a_reset_or_a_run_that_committed_nothing_is_allowed() {
    let PreviousRecord::Found(mut reset) = record(&[], RecordedStatus::Reset) else {
        unreachable!()
    };
    reset.max_id = 12;
    reset.epoch = 5;
    let never_checkpointed = record(&[], RecordedStatus::Running);
    for previous in [
        PreviousRecord::Found(reset),
        never_checkpointed,
        PreviousRecord::None,
    ] {
        assert_eq!(
            plan_start(ctx(&sinks(), REFUSE), &StartMode::Fresh, &previous, &[]),
            Ok(StartPlan::Fresh { note: None }),
            "{previous:?}"
        );
    }
}

#[test]
fn restored_metadata_must_be_the_recorded_restore_point() {
    let recorded = chk(12).with_epoch(3);
    assert_eq!(metadata_mismatch(&recorded, 12, 3), None);
    let copied_over = metadata_mismatch(&recorded, 10, 3).unwrap();
    assert!(
        copied_over.contains("checkpoint 10's, not checkpoint 12's"),
        "{copied_over}"
    );
    let stale = metadata_mismatch(&recorded, 12, 2).unwrap();
    assert!(stale.contains("written by epoch 2"), "{stale}");
    // A location named after another id than the one recorded.
    let renamed = RecordedCheckpoint::new(7, SnapshotType::Checkpoint, "/c/j/chk-8");
    assert!(metadata_mismatch(&renamed, 7, 1)
        .unwrap()
        .contains("named after checkpoint 8"));
    // A savepoint given by path, under any name, with no epoch on record.
    let by_path = RecordedCheckpoint::new(4, SnapshotType::Savepoint, "/backups/my-savepoint");
    assert_eq!(metadata_mismatch(&by_path, 4, 9), None);
}

#[test]
fn an_unusable_checkpoint_is_not_skipped_past_committed_output() {
    let err = on_unusable(
        ctx(&sinks(), REFUSE),
        &chk(3),
        "`/c/j/chk-3/_metadata` does not exist",
        Some(&chk(2)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("cannot restore checkpoint 3 of job `j`")
            && err.contains("chk-3/_metadata` does not exist")
            && err.contains(
                "restoring checkpoint 2 instead would commit the output of checkpoint 3 a second time"
            )
            && err.contains(FALLBACK_OPTION),
        "{err}"
    );
    let warning = on_unusable(ctx(&sinks(), ALLOW), &chk(5), "corrupt", Some(&chk(2))).unwrap();
    assert!(
        warning.contains("checkpoints 3..=5") && warning.contains("`Sink: files`"),
        "{warning}"
    );
    let warning = on_unusable(ctx(&[], REFUSE), &chk(5), "corrupt", None).unwrap();
    assert!(
        warning.contains("empty state") && warning.contains("idempotent"),
        "{warning}"
    );
}
