//! The data plane between two TaskManagers' network environments in one process, over real
//! TCP on 127.0.0.1.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::environment::{NetworkConfig, NetworkEnvironment, RunConnections};
use super::frame::RunId;
use super::transport::{NetworkTransport, Placement};
use crate::error::TaskError;
use crate::graph::execution_graph::{ExecutionChannel, SubtaskRef};
use crate::graph::ids::JobVertexId;
use crate::graph::partitioner::PartitionerKind;
use crate::runtime::channel::{cancel_pair, CancelToken, ChannelReceiver, ChannelSender};
use crate::runtime::input_gate::{GateNext, InputGate};
use crate::runtime::stream_element::{StreamElement, StreamEvent};
use crate::runtime::stream_type::{downcast, TypeOf};
use crate::runtime::transport::Transport;

const RUN: RunId = RunId {
    epoch: 1,
    attempt: 1,
};

fn subtask(vertex: u32, subtask: u32) -> SubtaskRef {
    SubtaskRef {
        vertex: JobVertexId(vertex),
        subtask,
    }
}

fn environment(id: &str, fingerprint: u64) -> NetworkEnvironment {
    NetworkEnvironment::bind(
        id,
        "127.0.0.1:0".parse().unwrap(),
        fingerprint,
        NetworkConfig {
            connect_timeout: Duration::from_secs(5),
            ..NetworkConfig::default()
        },
    )
    .unwrap()
}

/// Connects `a` and `b` for `RUN` (each side from its own thread, as two processes would).
fn connect(a: &NetworkEnvironment, b: &NetworkEnvironment) -> (RunConnections, RunConnections) {
    let peers: BTreeMap<String, _> = [
        (a.id().to_string(), a.address()),
        (b.id().to_string(), b.address()),
    ]
    .into();
    std::thread::scope(|s| {
        let other = s.spawn(|| b.connect_run(RUN, &peers).unwrap());
        let mine = a.connect_run(RUN, &peers).unwrap();
        (mine, other.join().unwrap())
    })
}

/// Channels `0..n` from vertex 0 on `tm-a` to vertex 1 on `tm-b`: the senders and the
/// receivers.
fn remote_channels(
    n: u32,
    capacity: usize,
    (a, b): (&RunConnections, &RunConnections),
) -> (Vec<ChannelSender<u64>>, Vec<ChannelReceiver<u64>>) {
    let placement: Placement = (0..n)
        .flat_map(|i| {
            [
                (subtask(0, i), "tm-a".to_string()),
                (subtask(1, i), "tm-b".to_string()),
            ]
        })
        .collect();
    let ty = TypeOf::<u64>::shared();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for i in 0..n {
        let channel = ExecutionChannel {
            job_edge: 0,
            partitioner: PartitionerKind::Forward,
            producer: subtask(0, i),
            consumer: subtask(1, i),
            output_index: 0,
            input_index: 0,
        };
        let on_a = NetworkTransport::new("tm-a", &placement, a)
            .create_channel(i, &channel, ty.as_ref(), capacity)
            .unwrap();
        let on_b = NetworkTransport::new("tm-b", &placement, b)
            .create_channel(i, &channel, ty.as_ref(), capacity)
            .unwrap();
        assert!(on_a.receiver.is_none() && on_b.sender.is_none());
        senders.push(downcast(on_a.sender.unwrap(), "sender").unwrap());
        receivers.push(downcast(on_b.receiver.unwrap(), "receiver").unwrap());
    }
    (senders, receivers)
}

fn batch(values: std::ops::Range<u64>) -> StreamElement<u64> {
    StreamElement::Records(values.collect::<Vec<_>>().into())
}

fn never_cancelled() -> CancelToken {
    let (handle, cancel) = cancel_pair();
    std::mem::forget(handle);
    cancel
}

#[test]
fn records_and_events_cross_in_order() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (senders, receivers) = remote_channels(2, 4, (&ca, &cb));
    ca.seal();
    cb.seal();
    let cancel = never_cancelled();
    let producer = std::thread::spawn({
        let cancel = cancel.clone();
        move || {
            for i in 0..100u64 {
                for s in &senders {
                    s.send(batch(i * 10..i * 10 + 10), &cancel).unwrap();
                }
            }
            for s in &senders {
                s.send(StreamElement::Event(StreamEvent::EndOfStream), &cancel)
                    .unwrap();
            }
        }
    });
    let mut gate = InputGate::new(receivers, cancel);
    let (_side_tx, side) = crossbeam_channel::unbounded::<()>();
    let mut seen: HashMap<usize, Vec<u64>> = HashMap::new();
    while !gate.is_finished() {
        match gate.next_blocking(&side, None).unwrap() {
            GateNext::Element(ch, StreamElement::Records(b)) => {
                seen.entry(ch).or_default().extend(b.into_records())
            }
            GateNext::Element(ch, StreamElement::Event(StreamEvent::EndOfStream)) => {
                gate.mark_finished(ch)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    producer.join().unwrap();
    for ch in 0..2 {
        assert_eq!(seen[&ch], (0..1000).collect::<Vec<_>>(), "channel {ch}");
    }
}

/// A channel whose receiver does not read stops its sender after `capacity` elements, while
/// another channel on the same connection keeps flowing.
#[test]
fn a_slow_channel_throttles_only_itself() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (mut senders, mut receivers) = remote_channels(2, 3, (&ca, &cb));
    ca.seal();
    cb.seal();
    let (fast_tx, slow_tx) = (senders.remove(0), senders.remove(0));
    let (fast_rx, slow_rx) = (receivers.remove(0), receivers.remove(0));
    let (cancel_handle, cancel) = cancel_pair();
    // The slow channel's sender fills its window, then blocks.
    let slow = std::thread::spawn({
        let cancel = cancel.clone();
        move || {
            let mut sent = 0;
            loop {
                match slow_tx.send(batch(0..1), &cancel) {
                    Ok(()) => sent += 1,
                    Err(TaskError::Cancelled) => return (sent, slow_tx.queued()),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    // Meanwhile the fast channel carries a thousand batches.
    let fast = std::thread::spawn({
        let cancel = cancel.clone();
        move || {
            for i in 0..1000 {
                fast_tx.send(batch(i..i + 1), &cancel).unwrap();
            }
        }
    });
    let mut gate = InputGate::new(vec![fast_rx], cancel.clone());
    let (_side_tx, side) = crossbeam_channel::unbounded::<()>();
    for _ in 0..1000 {
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        assert!(matches!(
            gate.next_blocking(&side, deadline).unwrap(),
            GateNext::Element(0, _)
        ));
    }
    fast.join().unwrap();
    drop(cancel_handle);
    let (sent, in_flight) = slow.join().unwrap();
    assert_eq!(sent, 3, "the slow sender sent exactly its window");
    assert_eq!(in_flight, 3);
    assert_eq!(slow_rx.rx.len(), 3, "and its receiver holds them");
}

#[test]
fn a_cut_connection_fails_both_ends_with_the_reason() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (senders, receivers) = remote_channels(1, 2, (&ca, &cb));
    ca.seal();
    cb.seal();
    let cancel = never_cancelled();
    senders[0].send(batch(0..5), &cancel).unwrap();
    ca.shutdown("cut by the test");
    let deadline = Instant::now() + Duration::from_secs(10);
    // The sender fails once its window is spent (or at once, if the writer noticed).
    let error = loop {
        match senders[0].send(batch(0..1), &cancel) {
            Ok(()) => assert!(Instant::now() < deadline, "sending never failed"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&error, TaskError::ConnectionLost { reason, .. } if reason.contains("cut by the test")),
        "{error}"
    );
    let mut gate = InputGate::new(receivers, cancel);
    let (_side_tx, side) = crossbeam_channel::unbounded::<()>();
    let outcome = loop {
        match gate.next_blocking(&side, Some(deadline)) {
            Ok(GateNext::Element(..)) => {}
            other => break other,
        }
    };
    // The receiving side names the connection, not just a vanished upstream.
    assert!(
        matches!(&outcome, Err(TaskError::ConnectionLost { peer, .. }) if peer.contains("tm-a")),
        "{outcome:?}"
    );
    assert!(cb.failure().is_some() || ca.failure().is_some());
}

#[test]
fn a_peer_built_from_other_code_is_refused() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 8));
    let peers: BTreeMap<String, _> = [
        (a.id().to_string(), a.address()),
        (b.id().to_string(), b.address()),
    ]
    .into();
    let error = a.connect_run(RUN, &peers).err().expect("refused");
    assert!(
        error.to_string().contains("built from another job graph"),
        "{error}"
    );
}

#[test]
fn a_peer_that_never_dials_times_out_naming_it() {
    let a = NetworkEnvironment::bind(
        "tm-b",
        "127.0.0.1:0".parse().unwrap(),
        7,
        NetworkConfig {
            connect_timeout: Duration::from_millis(200),
            ..NetworkConfig::default()
        },
    )
    .unwrap();
    let peers: BTreeMap<String, _> = [
        ("tm-a".to_string(), "127.0.0.1:9".parse().unwrap()),
        (a.id().to_string(), a.address()),
    ]
    .into();
    let error = a.connect_run(RUN, &peers).err().expect("timed out");
    assert!(
        error.to_string().contains("`tm-a` did not connect"),
        "{error}"
    );
}

#[test]
fn a_port_in_use_names_the_setting() {
    let a = environment("tm-a", 7);
    let error = NetworkEnvironment::bind("tm-b", a.address(), 7, NetworkConfig::default())
        .err()
        .expect("the port is taken");
    assert!(
        error.to_string().contains("taskmanager.data.port"),
        "{error}"
    );
}

#[test]
fn a_batch_larger_than_a_frame_fails_its_task_not_the_connection() {
    let config = NetworkConfig {
        max_frame_bytes: 512,
        connect_timeout: Duration::from_secs(5),
    };
    let a = NetworkEnvironment::bind("tm-a", "127.0.0.1:0".parse().unwrap(), 7, config.clone())
        .unwrap();
    let b = NetworkEnvironment::bind("tm-b", "127.0.0.1:0".parse().unwrap(), 7, config).unwrap();
    let (mut ca, mut cb) = connect(&a, &b);
    let (senders, receivers) = remote_channels(1, 4, (&ca, &cb));
    ca.seal();
    cb.seal();
    let cancel = never_cancelled();
    let error = senders[0].send(batch(0..1000), &cancel).unwrap_err();
    assert!(
        error.to_string().contains("larger than the 512 bytes"),
        "{error}"
    );
    // The connection is intact: a small batch still crosses.
    senders[0].send(batch(0..3), &cancel).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while receivers[0].rx.is_empty() {
        assert!(Instant::now() < deadline, "the small batch never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(ca.failure().is_none() && cb.failure().is_none());
}

#[test]
fn a_peer_that_ends_normally_is_a_closed_channel_not_a_lost_connection() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (senders, receivers) = remote_channels(1, 2, (&ca, &cb));
    ca.seal();
    cb.seal();
    // The receiving side's tasks end: its direction closes with a close frame.
    drop(receivers);
    let cancel = never_cancelled();
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        match senders[0].send(batch(0..1), &cancel) {
            Ok(()) => assert!(Instant::now() < deadline, "sending never stopped"),
            Err(e) => break e,
        }
    };
    assert!(error.is_secondary(), "{error}");
    assert!(cb.failure().is_none(), "{:?}", cb.failure());
}

/// A receiver that grants more credits than its queue holds breaks the protocol: the
/// connection fails rather than letting the sender queue without bound.
#[test]
fn credits_beyond_the_window_fail_the_connection() {
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (senders, _receivers) = remote_channels(1, 2, (&ca, &cb));
    // tm-b grants more than the window of 2 (it already granted 2).
    cb.get("tm-a").unwrap().credit_return(0).unwrap().grant(5);
    ca.seal();
    cb.seal();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ca.failure().is_none() {
        assert!(Instant::now() < deadline, "the excess was accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        ca.failure().unwrap().contains("more than its window of 2"),
        "{:?}",
        ca.failure()
    );
    drop(senders);
}

/// An unaligned checkpoint's barrier crosses a connection whose channel is full: it spends
/// no credit, arrives on the receiver's priority lane ahead of the queued batches and rings
/// the receiving task's doorbell; a sender waiting for credits with a wakeup gets its
/// element back when the wakeup rings.
#[test]
fn a_priority_barrier_overtakes_a_full_channel_and_a_waiting_sender_defers() {
    use crate::runtime::stream_element::{CheckpointBarrier, SnapshotType};
    let (a, b) = (environment("tm-a", 7), environment("tm-b", 7));
    let (mut ca, mut cb) = connect(&a, &b);
    let (mut senders, mut receivers) = remote_channels(1, 2, (&ca, &cb));
    ca.seal();
    cb.seal();
    let (tx, rx) = (senders.remove(0), receivers.remove(0));
    let cancel = never_cancelled();
    let (bell, doorbell) = crossbeam_channel::bounded::<()>(1);
    let mut gate = InputGate::new(vec![rx], cancel.clone()).with_doorbell(bell, doorbell.clone());
    gate.watch_priority();
    // Fill the window: the next send would wait for a credit.
    tx.send(batch(0..1), &cancel).unwrap();
    tx.send(batch(1..2), &cancel).unwrap();
    let barrier = CheckpointBarrier {
        checkpoint_id: 3,
        timestamp_millis: 0,
        snapshot_type: SnapshotType::Checkpoint,
        is_final: false,
        stop: None,
        unaligned: true,
    };
    tx.send_priority(barrier).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        if let Some(seen) = gate.poll_priority() {
            break seen;
        }
        assert!(Instant::now() < deadline, "the priority barrier never came");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(seen, (0, barrier));
    // The doorbell rang, and reading the lanes emptied it.
    assert!(doorbell.is_empty());
    // A sender out of credits defers at once once its wakeup has rung.
    let (ring, wakeup) = crossbeam_channel::bounded::<()>(1);
    ring.send(()).unwrap();
    let back = tx.send_or_defer(batch(2..3), &cancel, &wakeup).unwrap();
    assert_eq!(back, Some(batch(2..3)));
    // The queued batches are all still there, behind the barrier.
    let mut records = Vec::new();
    while let Some((_, element)) = gate.poll().unwrap() {
        if let StreamElement::Records(b) = element {
            records.extend(b.into_records());
        }
        if records.len() == 2 {
            break;
        }
        if Instant::now() > deadline {
            panic!("the queued batches never came");
        }
    }
    assert_eq!(records, vec![0, 1]);
}
