//! The coordinator side of the Kafka source: discovers partitions (at start and then
//! periodically), resolves where each new one starts, and assigns it to its owner reader.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use serde::{Deserialize, Serialize};
use weir::connectors::source::{SplitEnumerator, SplitEnumeratorContext};
use weir::BoxError;

use super::split::{split_owner, KafkaPartitionSplit};
use super::starting_offsets::StartingOffsets;
use super::{SourceSettings, TopicSubscription};
use crate::error::KafkaError;

/// What a checkpoint keeps of the enumerator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaEnumeratorState {
    /// Every partition discovered so far (assigned or not).
    pub known: Vec<(String, i32)>,
    /// Splits not yet handed to a reader.
    pub unassigned: Vec<KafkaPartitionSplit>,
    /// Whether the first discovery ran: partitions found later start at the earliest offset.
    pub initial_discovery_done: bool,
}

/// The Kafka source's split enumerator.
pub struct KafkaSourceEnumerator<T> {
    settings: Arc<SourceSettings<T>>,
    parallelism: u32,
    consumer: Option<BaseConsumer>,
    known: BTreeSet<(String, i32)>,
    unassigned: Vec<KafkaPartitionSplit>,
    initial_discovery_done: bool,
}

impl<T> KafkaSourceEnumerator<T> {
    pub(crate) fn new(
        settings: Arc<SourceSettings<T>>,
        parallelism: u32,
        restored: Option<KafkaEnumeratorState>,
    ) -> Self {
        let restored = restored.unwrap_or(KafkaEnumeratorState {
            known: Vec::new(),
            unassigned: Vec::new(),
            initial_discovery_done: false,
        });
        Self {
            settings,
            parallelism,
            consumer: None,
            known: restored.known.into_iter().collect(),
            unassigned: restored.unassigned,
            initial_discovery_done: restored.initial_discovery_done,
        }
    }

    fn consumer(&mut self) -> Result<&BaseConsumer, KafkaError> {
        if self.consumer.is_none() {
            // read_committed: ListOffsets(latest) then answers the last stable offset.
            let mut defaults = vec![
                ("enable.auto.commit", "false"),
                ("isolation.level", "read_committed"),
            ];
            if let Some(group) = &self.settings.group_id {
                defaults.push(("group.id", group.as_str()));
            }
            let consumer: BaseConsumer = self
                .settings
                .connection
                .client_config(&defaults)
                .create()
                .map_err(|e| KafkaError::client("creating the enumerator's consumer", e))?;
            self.consumer = Some(consumer);
        }
        self.consumer
            .as_ref()
            .ok_or_else(|| KafkaError::Config("consumer missing".into()))
    }

    /// Partitions of subscribed topics that are not known yet.
    fn new_partitions(&mut self) -> Result<Vec<(String, i32)>, KafkaError> {
        let single_topic = match &self.settings.subscription {
            TopicSubscription::Topics(topics) if topics.len() == 1 => Some(topics[0].clone()),
            _ => None,
        };
        let connection = self.settings.connection.clone();
        let consumer = self.consumer()?;
        let metadata = connection.check_reachable(consumer, single_topic.as_deref())?;
        let mut found = Vec::new();
        let mut present = BTreeSet::new();
        for topic in metadata.topics() {
            if !self.settings.subscription.matches(topic.name()) || topic.error().is_some() {
                continue;
            }
            present.insert(topic.name().to_string());
            for partition in topic.partitions() {
                let id = (topic.name().to_string(), partition.id());
                if !self.known.contains(&id) {
                    found.push(id);
                }
            }
        }
        if let TopicSubscription::Topics(topics) = &self.settings.subscription {
            if let Some(missing) = topics.iter().find(|t| !present.contains(*t)) {
                return Err(KafkaError::Config(format!(
                    "Kafka topic `{missing}` does not exist on {}",
                    self.settings.connection.bootstrap_servers
                )));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Discovers new partitions, turns them into splits and assigns those whose owner is up.
    fn discover(
        &mut self,
        context: &mut SplitEnumeratorContext<KafkaPartitionSplit>,
    ) -> Result<(), KafkaError> {
        let partitions = self.new_partitions()?;
        if !partitions.is_empty() {
            let starting = if self.initial_discovery_done {
                StartingOffsets::Earliest
            } else {
                self.settings.starting_offsets
            };
            let connection = self.settings.connection.clone();
            let bounded = self.settings.bounded;
            let consumer = self.consumer()?;
            let starts = starting.resolve(consumer, &connection, &partitions)?;
            let stops = if bounded {
                StartingOffsets::Latest
                    .resolve(consumer, &connection, &partitions)?
                    .into_iter()
                    .map(Some)
                    .collect()
            } else {
                vec![None; partitions.len()]
            };
            for (((topic, partition), next_offset), stopping_offset) in
                partitions.into_iter().zip(starts).zip(stops)
            {
                tracing::info!(%topic, partition, next_offset, ?stopping_offset, "discovered Kafka partition");
                self.known.insert((topic.clone(), partition));
                self.unassigned.push(KafkaPartitionSplit {
                    topic,
                    partition,
                    next_offset,
                    stopping_offset,
                });
            }
        }
        self.initial_discovery_done = true;
        self.assign_pending(context);
        Ok(())
    }

    fn assign_pending(&mut self, context: &mut SplitEnumeratorContext<KafkaPartitionSplit>) {
        let registered: Vec<u32> = context.registered_readers().to_vec();
        let parallelism = self.parallelism;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unassigned)
            .into_iter()
            .partition(|s| registered.contains(&split_owner(&s.topic, s.partition, parallelism)));
        self.unassigned = waiting;
        for split in ready {
            let owner = split_owner(&split.topic, split.partition, parallelism);
            context.assign_split(split, owner);
        }
    }
}

impl<T: Send + Sync + 'static> SplitEnumerator for KafkaSourceEnumerator<T> {
    type Split = KafkaPartitionSplit;
    type Checkpoint = KafkaEnumeratorState;

    fn start(
        &mut self,
        context: &mut SplitEnumeratorContext<KafkaPartitionSplit>,
    ) -> Result<(), BoxError> {
        // A restored bounded source already knows all its partitions.
        if !(self.settings.bounded && self.initial_discovery_done) {
            self.discover(context)?;
        }
        Ok(())
    }

    fn add_reader(
        &mut self,
        subtask: u32,
        context: &mut SplitEnumeratorContext<KafkaPartitionSplit>,
    ) -> Result<(), BoxError> {
        self.assign_pending(context);
        if self.settings.bounded {
            context.signal_no_more_splits(subtask);
        }
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        _subtask: u32,
        _context: &mut SplitEnumeratorContext<KafkaPartitionSplit>,
    ) -> Result<(), BoxError> {
        // Partitions are pushed to their owners; requests carry no information.
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        splits: Vec<KafkaPartitionSplit>,
        _subtask: u32,
    ) -> Result<(), BoxError> {
        self.unassigned.extend(splits);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<KafkaEnumeratorState, BoxError> {
        Ok(KafkaEnumeratorState {
            known: self.known.iter().cloned().collect(),
            unassigned: self.unassigned.clone(),
            initial_discovery_done: self.initial_discovery_done,
        })
    }

    fn tick_interval(&self) -> Option<Duration> {
        self.settings.discovery_interval
    }

    fn on_tick(
        &mut self,
        context: &mut SplitEnumeratorContext<KafkaPartitionSplit>,
    ) -> Result<(), BoxError> {
        // A failed discovery is retried at the next tick: the readers keep reading what
        // they have, and a broker that stays away shows up in their errors.
        if let Err(e) = self.discover(context) {
            tracing::warn!(error = %e, "Kafka partition discovery failed; retrying at the next interval");
        }
        Ok(())
    }
}
