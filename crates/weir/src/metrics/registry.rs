//! The metrics of the tasks running in this process: one registry per job per process
//! (the mini-cluster's, or a TaskManager's), holding the latest run's tasks.

use std::sync::{Arc, Mutex};

use super::sample::SubtaskSample;
use super::task_metrics::TaskMetrics;
use crate::graph::execution_graph::SubtaskRef;

/// The live task metrics of one job in this process (Flink's `MetricRegistry`, per job).
/// A run's tasks register here when deployed; a newer run replaces an older one's, whose
/// last values stay readable until then.
#[derive(Debug, Default)]
pub struct MetricRegistry {
    tasks: Mutex<Vec<Arc<TaskMetrics>>>,
}

impl MetricRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the metrics of `task` in run attempt `attempt`, dropping those of earlier
    /// attempts; `source`: whether its chain starts with a source.
    pub fn register_task(
        &self,
        task: SubtaskRef,
        name: impl Into<String>,
        attempt: u64,
        source: bool,
    ) -> Arc<TaskMetrics> {
        let metrics = Arc::new(TaskMetrics::new(task, name, attempt, source));
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tasks.retain(|t| t.attempt() >= attempt && t.task() != task);
        tasks.push(metrics.clone());
        metrics
    }

    /// The values of every registered task now.
    pub fn sample(&self) -> Vec<SubtaskSample> {
        let tasks: Vec<Arc<TaskMetrics>> = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        tasks.iter().map(|t| t.sample()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ids::{JobVertexId, NodeId};

    fn subtask(vertex: u32, subtask: u32) -> SubtaskRef {
        SubtaskRef {
            vertex: JobVertexId(vertex),
            subtask,
        }
    }

    #[test]
    fn a_newer_attempt_replaces_the_older_ones() {
        let registry = MetricRegistry::new();
        let old = registry.register_task(subtask(0, 0), "a (1/2)", 1, true);
        registry.register_task(subtask(0, 1), "a (2/2)", 1, true);
        old.operator(NodeId(0), "a").records_out.inc_by(5);
        assert_eq!(registry.sample().len(), 2);
        assert_eq!(registry.sample()[0].records_in, 5);
        registry.register_task(subtask(0, 0), "a (1/2)", 2, true);
        let samples = registry.sample();
        assert_eq!(samples.len(), 1);
        assert_eq!((samples[0].attempt, samples[0].records_in), (2, 0));
    }
}
