//! The JobManager's view of a job's metrics (Flink's `MetricStore`): the latest sample of
//! every subtask, wherever it runs, the rates derived from successive samples, and a short
//! history of each vertex's throughput for the dashboard.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::sample::SubtaskSample;

/// How many throughput points are kept (at the default interval of one second: five
/// minutes).
const HISTORY: usize = 300;

/// Per-second rates of one subtask, from its last two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SubtaskRates {
    /// `numRecordsInPerSecond`.
    pub records_in_per_second: f64,
    /// `numRecordsOutPerSecond`.
    pub records_out_per_second: f64,
    /// `numBytesInPerSecond`.
    pub bytes_in_per_second: f64,
    /// `numBytesOutPerSecond`.
    pub bytes_out_per_second: f64,
    /// `busyTimeMsPerSecond`: neither idle nor backpressured.
    pub busy_time_ms_per_second: f64,
    /// `idleTimeMsPerSecond`: waiting for input.
    pub idle_time_ms_per_second: f64,
    /// `backPressuredTimeMsPerSecond`: waiting for room downstream.
    pub back_pressured_time_ms_per_second: f64,
}

/// Per-second rates of one operator of a subtask's chain, from its last two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OperatorRates {
    /// The operator's node.
    pub node: u32,
    /// `numRecordsInPerSecond`.
    pub records_in_per_second: f64,
    /// `numRecordsOutPerSecond`.
    pub records_out_per_second: f64,
}

/// Flink's backpressure level, from the share of time a subtask is backpressured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BackpressureLevel {
    /// At most 10 % of the time.
    Ok,
    /// At most 50 %.
    Low,
    /// More than 50 %.
    High,
}

impl BackpressureLevel {
    /// The level of `ms_per_second` backpressured milliseconds per second.
    pub fn of(ms_per_second: f64) -> Self {
        if ms_per_second <= 100.0 {
            Self::Ok
        } else if ms_per_second <= 500.0 {
            Self::Low
        } else {
            Self::High
        }
    }
}

/// One subtask as the store knows it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredSubtask {
    /// The latest sample.
    #[serde(flatten)]
    pub sample: SubtaskSample,
    /// Rates over the last interval.
    pub rates: SubtaskRates,
    /// Each chained operator's rates over the last interval, in the sample's order.
    pub operator_rates: Vec<OperatorRates>,
    /// The TaskManager it runs on (`None`: this process).
    pub taskmanager: Option<String>,
}

/// A job vertex's throughput at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputPoint {
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Per vertex: records in and out per second, summed over its subtasks.
    pub vertices: Vec<VertexThroughput>,
}

/// A vertex's rates at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VertexThroughput {
    /// The vertex.
    pub vertex: u32,
    /// Records in per second.
    pub records_in_per_second: f64,
    /// Records out per second.
    pub records_out_per_second: f64,
}

/// A job vertex's metrics, aggregated over its subtasks as Flink's job graph shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VertexMetrics {
    /// Records received, summed.
    pub records_in: u64,
    /// Records sent, summed.
    pub records_out: u64,
    /// Bytes received over the network, summed.
    pub bytes_in: u64,
    /// Bytes sent over the network, summed.
    pub bytes_out: u64,
    /// Rates summed over the subtasks; the time rates are the highest subtask's.
    pub rates: SubtaskRates,
    /// The lowest input watermark over the subtasks (`None` while one has none).
    pub watermark: Option<i64>,
}

impl VertexMetrics {
    /// Flink's backpressure level of the vertex: that of its most backpressured subtask.
    pub fn backpressure_level(&self) -> BackpressureLevel {
        BackpressureLevel::of(self.rates.back_pressured_time_ms_per_second)
    }
}

/// The latest metrics of one job.
#[derive(Debug, Default)]
pub struct MetricStore {
    subtasks: BTreeMap<(u32, u32), StoredSubtask>,
    history: VecDeque<ThroughputPoint>,
}

fn per_second(delta: u64, ms: u64) -> f64 {
    if ms == 0 {
        0.0
    } else {
        delta as f64 * 1000.0 / ms as f64
    }
}

fn rates(previous: Option<&SubtaskSample>, now: &SubtaskSample) -> SubtaskRates {
    // Rates over the interval since the previous sample of the same attempt, else since the
    // task started. The task's own uptime measures the interval, so samples taken in
    // another process need no shared clock.
    let base = previous.filter(|p| p.attempt == now.attempt && p.uptime_ms <= now.uptime_ms);
    let d = |f: fn(&SubtaskSample) -> u64| now_minus(base.map(f), f(now));
    let ms = d(|s| s.uptime_ms);
    let idle = per_second(d(|s| s.idle_ms), ms).min(1000.0);
    let backpressured = per_second(d(|s| s.backpressured_ms), ms).min(1000.0 - idle);
    SubtaskRates {
        records_in_per_second: per_second(d(|s| s.records_in), ms),
        records_out_per_second: per_second(d(|s| s.records_out), ms),
        bytes_in_per_second: per_second(d(|s| s.bytes_in), ms),
        bytes_out_per_second: per_second(d(|s| s.bytes_out), ms),
        busy_time_ms_per_second: if ms == 0 {
            0.0
        } else {
            (1000.0 - idle - backpressured).max(0.0)
        },
        idle_time_ms_per_second: idle,
        back_pressured_time_ms_per_second: backpressured,
    }
}

fn operator_rates(previous: Option<&SubtaskSample>, now: &SubtaskSample) -> Vec<OperatorRates> {
    let base = previous.filter(|p| p.attempt == now.attempt && p.uptime_ms <= now.uptime_ms);
    let ms = now_minus(base.map(|b| b.uptime_ms), now.uptime_ms);
    now.operators
        .iter()
        .map(|op| {
            let before = base.and_then(|b| b.operators.iter().find(|o| o.node == op.node));
            OperatorRates {
                node: op.node,
                records_in_per_second: per_second(
                    now_minus(before.map(|b| b.records_in), op.records_in),
                    ms,
                ),
                records_out_per_second: per_second(
                    now_minus(before.map(|b| b.records_out), op.records_out),
                    ms,
                ),
            }
        })
        .collect()
}

fn now_minus(before: Option<u64>, now: u64) -> u64 {
    now.saturating_sub(before.unwrap_or(0))
}

impl MetricStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in `samples` from `taskmanager` (`None`: this process).
    pub fn update(&mut self, samples: Vec<SubtaskSample>, taskmanager: Option<&str>) {
        for sample in samples {
            let key = (sample.vertex, sample.subtask);
            if let Some(stored) = self.subtasks.get_mut(&key) {
                if stored.sample.attempt > sample.attempt {
                    continue; // a late sample of an earlier run
                }
                // A sample of the same millisecond (a TaskManager's read twice between two
                // heartbeats, or a task that ended right after the last sample): its values are
                // the newest — a sink may have committed meanwhile — but an interval of zero
                // milliseconds has no rates, so the last interval's stand.
                if stored.sample.attempt == sample.attempt
                    && stored.sample.uptime_ms == sample.uptime_ms
                {
                    stored.sample = sample;
                    stored.taskmanager = taskmanager.map(str::to_string);
                    continue;
                }
            }
            let previous = self.subtasks.get(&key).map(|s| &s.sample);
            let rates = rates(previous, &sample);
            let operator_rates = operator_rates(previous, &sample);
            self.subtasks.insert(
                key,
                StoredSubtask {
                    sample,
                    rates,
                    operator_rates,
                    taskmanager: taskmanager.map(str::to_string),
                },
            );
        }
    }

    /// Appends the vertices' current throughput to the history, stamped `timestamp`
    /// (milliseconds since the Unix epoch).
    pub fn record_history(&mut self, timestamp: i64) {
        let mut vertices: BTreeMap<u32, VertexThroughput> = BTreeMap::new();
        for s in self.subtasks.values() {
            let v = vertices.entry(s.sample.vertex).or_insert(VertexThroughput {
                vertex: s.sample.vertex,
                records_in_per_second: 0.0,
                records_out_per_second: 0.0,
            });
            v.records_in_per_second += s.rates.records_in_per_second;
            v.records_out_per_second += s.rates.records_out_per_second;
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(ThroughputPoint {
            timestamp,
            vertices: vertices.into_values().collect(),
        });
    }

    /// Every subtask, by vertex and index.
    pub fn subtasks(&self) -> impl Iterator<Item = &StoredSubtask> {
        self.subtasks.values()
    }

    /// The subtasks of `vertex`.
    pub fn subtasks_of(&self, vertex: u32) -> impl Iterator<Item = &StoredSubtask> {
        self.subtasks
            .range((vertex, 0)..=(vertex, u32::MAX))
            .map(|(_, s)| s)
    }

    /// `vertex`'s metrics over its subtasks (`None`: no sample of it yet).
    pub fn vertex(&self, vertex: u32) -> Option<VertexMetrics> {
        let mut subtasks = self.subtasks_of(vertex).peekable();
        subtasks.peek()?;
        let mut m = VertexMetrics::default();
        let mut watermark = Some(i64::MAX);
        for s in subtasks {
            m.records_in += s.sample.records_in;
            m.records_out += s.sample.records_out;
            m.bytes_in += s.sample.bytes_in;
            m.bytes_out += s.sample.bytes_out;
            let (r, t) = (&mut m.rates, &s.rates);
            r.records_in_per_second += t.records_in_per_second;
            r.records_out_per_second += t.records_out_per_second;
            r.bytes_in_per_second += t.bytes_in_per_second;
            r.bytes_out_per_second += t.bytes_out_per_second;
            r.busy_time_ms_per_second = r.busy_time_ms_per_second.max(t.busy_time_ms_per_second);
            r.idle_time_ms_per_second = r.idle_time_ms_per_second.max(t.idle_time_ms_per_second);
            r.back_pressured_time_ms_per_second = r
                .back_pressured_time_ms_per_second
                .max(t.back_pressured_time_ms_per_second);
            watermark = match (watermark, s.sample.input_watermark) {
                (Some(low), Some(w)) => Some(low.min(w)),
                _ => None,
            };
        }
        m.watermark = watermark;
        Some(m)
    }

    /// The throughput history, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &ThroughputPoint> {
        self.history.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::sample::SubtaskState;

    fn sample(
        subtask: u32,
        attempt: u64,
        uptime_ms: u64,
        records: u64,
        idle: u64,
        bp: u64,
    ) -> SubtaskSample {
        SubtaskSample {
            vertex: 1,
            subtask,
            name: format!("map ({}/2)", subtask + 1),
            attempt,
            state: SubtaskState::Running,
            uptime_ms,
            records_in: records,
            records_out: records,
            bytes_in: 0,
            bytes_out: 0,
            idle_ms: idle,
            backpressured_ms: bp,
            input_queue: 0,
            output_queue: 0,
            input_watermark: Some(100 + subtask as i64),
            // A filter that keeps half.
            operators: vec![crate::metrics::sample::OperatorSample {
                node: 3,
                name: "filter".into(),
                records_in: records,
                records_out: records / 2,
                watermark: None,
                user: Vec::new(),
            }],
        }
    }

    #[test]
    fn rates_come_from_the_interval_between_samples_of_one_attempt() {
        let mut store = MetricStore::new();
        store.update(vec![sample(0, 1, 1000, 500, 200, 0)], None);
        let first = store.subtasks().next().unwrap().rates;
        assert_eq!(first.records_in_per_second, 500.0);
        assert_eq!(first.busy_time_ms_per_second, 800.0);
        store.update(vec![sample(0, 1, 3000, 4500, 400, 1200)], Some("tm-1"));
        let s = store.subtasks().next().unwrap();
        assert_eq!(s.rates.records_in_per_second, 2000.0);
        assert_eq!(s.rates.idle_time_ms_per_second, 100.0);
        assert_eq!(s.rates.back_pressured_time_ms_per_second, 600.0);
        assert_eq!(s.rates.busy_time_ms_per_second, 300.0);
        assert_eq!(s.taskmanager.as_deref(), Some("tm-1"));
        // The same sample read again (between two heartbeats) keeps the interval's rates.
        store.update(vec![sample(0, 1, 3000, 4500, 400, 1200)], Some("tm-1"));
        assert_eq!(
            store.subtasks().next().unwrap().rates.records_in_per_second,
            2000.0
        );
        // A sample of the same millisecond with newer values (a task that ended right after
        // the last sample, its sink's commit counted) replaces the values, keeps the rates.
        let mut newer = sample(0, 1, 3000, 4600, 400, 1200);
        newer.state = SubtaskState::Finished;
        store.update(vec![newer], Some("tm-1"));
        let s = store.subtasks().next().unwrap();
        assert_eq!(
            (
                s.sample.records_in,
                s.sample.state,
                s.rates.records_in_per_second
            ),
            (4600, SubtaskState::Finished, 2000.0)
        );
        // Operators' rates come from their own counts over the same interval.
        let op = store.subtasks().next().unwrap().operator_rates[0];
        assert_eq!(
            (op.node, op.records_in_per_second, op.records_out_per_second),
            (3, 2000.0, 1000.0)
        );
        // A new attempt starts over; a late sample of the old one is ignored.
        store.update(vec![sample(0, 2, 1000, 100, 0, 0)], None);
        store.update(vec![sample(0, 1, 4000, 9000, 0, 0)], None);
        let s = store.subtasks().next().unwrap();
        assert_eq!(
            (s.sample.attempt, s.rates.records_in_per_second),
            (2, 100.0)
        );
    }

    #[test]
    fn a_vertex_sums_counts_and_shows_its_worst_subtask() {
        let mut store = MetricStore::new();
        store.update(
            vec![
                sample(0, 1, 1000, 100, 0, 700),
                sample(1, 1, 1000, 300, 900, 0),
            ],
            None,
        );
        let v = store.vertex(1).unwrap();
        assert_eq!((v.records_in, v.records_out), (400, 400));
        assert_eq!(v.rates.records_in_per_second, 400.0);
        assert_eq!(v.backpressure_level(), BackpressureLevel::High);
        assert_eq!(v.watermark, Some(100));
        assert!(store.vertex(7).is_none());
        store.record_history(1);
        let point = store.history().next().unwrap();
        assert_eq!(point.vertices[0].records_out_per_second, 400.0);
    }

    #[test]
    fn backpressure_levels_follow_flinks_thresholds() {
        assert_eq!(BackpressureLevel::of(100.0), BackpressureLevel::Ok);
        assert_eq!(BackpressureLevel::of(100.1), BackpressureLevel::Low);
        assert_eq!(BackpressureLevel::of(500.0), BackpressureLevel::Low);
        assert_eq!(BackpressureLevel::of(501.0), BackpressureLevel::High);
    }
}
