//! The origin a traced record carries ([`TracedOrigin`]): where it was read, as a place
//! interned once per file or Kafka partition ([`OriginPlace`]) and a position in it, so that
//! tracing every record's origin copies 16 bytes per record and allocates nothing.
//!
//! Records carry origins only in attempts that trace them (after a failure user code may
//! have caused, see [`RecordOriginTracing`](crate::config::RecordOriginTracing)); an
//! operator failing on a record then names its [`RecordOrigin`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::connectors::malformed::RecordOrigin;

/// Where a split's records are read, without the position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Place {
    File(String),
    Kafka { topic: String, partition: i32 },
}

/// The places interned in this process: few (one per file or partition read while tracing),
/// looked up only to name a failing record or to send a traced record to another process.
#[derive(Default)]
struct Places {
    ids: HashMap<Arc<Place>, u32>,
    places: Vec<Arc<Place>>,
}

static PLACES: LazyLock<Mutex<Places>> = LazyLock::new(Mutex::default);

fn intern(place: Place) -> OriginPlace {
    // A poisoned lock only means another thread panicked while interning; the table is
    // still consistent (an insert is one push and one map entry).
    let mut places = PLACES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = places.ids.get(&place) {
        return OriginPlace(*id);
    }
    let id = u32::try_from(places.places.len()).unwrap_or(u32::MAX);
    let place = Arc::new(place);
    places.places.push(place.clone());
    places.ids.insert(place, id);
    OriginPlace(id)
}

fn place_of(id: u32) -> Option<Arc<Place>> {
    let places = PLACES.lock().unwrap_or_else(|p| p.into_inner());
    places.places.get(id as usize).cloned()
}

/// A file or a Kafka partition that records are read from, interned in this process: a
/// reader makes one per split and gives it with each record's position to
/// [`Collector::collect_from`](crate::Collector::collect_from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginPlace(u32);

impl OriginPlace {
    /// The file at `path`; positions are 1-based line numbers.
    pub fn file(path: &str) -> Self {
        intern(Place::File(path.to_string()))
    }

    /// Partition `partition` of Kafka topic `topic`; positions are offsets.
    pub fn kafka(topic: &str, partition: i32) -> Self {
        intern(Place::Kafka {
            topic: topic.to_string(),
            partition,
        })
    }

    /// The record at `position` of this place.
    #[inline]
    pub fn at(self, position: u64) -> TracedOrigin {
        TracedOrigin {
            place: self,
            position,
        }
    }
}

/// Where a traced record was read: a place and a position in it (see the module).
///
/// ```
/// use weir::connectors::origin::{OriginPlace, TracedOrigin};
/// use weir::prelude::*;
/// let origin = OriginPlace::file("orders.csv").at(12);
/// assert_eq!(origin.to_origin(), RecordOrigin::File { file: "orders.csv".into(), line: 12 });
/// let kafka = RecordOrigin::Kafka { topic: "events".into(), partition: 2, offset: 41 };
/// assert_eq!(TracedOrigin::from(&kafka).to_origin(), kafka);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracedOrigin {
    place: OriginPlace,
    position: u64,
}

impl TracedOrigin {
    /// The origin as errors and dead letters name it.
    pub fn to_origin(self) -> RecordOrigin {
        match place_of(self.place.0).as_deref() {
            Some(Place::File(file)) => RecordOrigin::File {
                file: file.clone(),
                line: self.position,
            },
            Some(Place::Kafka { topic, partition }) => RecordOrigin::Kafka {
                topic: topic.clone(),
                partition: *partition,
                // Offsets are never negative; the cast round-trips any i64 anyway.
                offset: self.position as i64,
            },
            // Ids are only made by `intern`, so this is never reached; a file of no name is
            // still a readable answer.
            None => RecordOrigin::File {
                file: String::new(),
                line: self.position,
            },
        }
    }
}

impl From<&RecordOrigin> for TracedOrigin {
    fn from(origin: &RecordOrigin) -> Self {
        match origin {
            RecordOrigin::File { file, line } => OriginPlace::file(file).at(*line),
            RecordOrigin::Kafka {
                topic,
                partition,
                offset,
            } => OriginPlace::kafka(topic, *partition).at(*offset as u64),
        }
    }
}

/// Sent to another process as the [`RecordOrigin`] it names (an interned id means nothing
/// there), and interned again on arrival.
impl Serialize for TracedOrigin {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_origin().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TracedOrigin {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(TracedOrigin::from(&RecordOrigin::deserialize(
            deserializer,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_interned_once_and_origins_round_trip_through_postcard() {
        let a = OriginPlace::file("/data/a.csv");
        assert_eq!(a, OriginPlace::file("/data/a.csv"));
        assert_ne!(a, OriginPlace::file("/data/b.csv"));
        assert_ne!(OriginPlace::kafka("t", 0), OriginPlace::kafka("t", 1));
        let origin = OriginPlace::kafka("t", 1).at(77);
        let bytes = postcard::to_allocvec(&origin).unwrap();
        let back: TracedOrigin = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, origin);
        assert_eq!(
            back.to_origin(),
            RecordOrigin::Kafka {
                topic: "t".into(),
                partition: 1,
                offset: 77
            }
        );
    }
}
