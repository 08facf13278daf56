//! The JobManager's view of its TaskManagers — sessions, slots, heartbeats — and where a
//! run's subtasks go. Pure: time is passed in, so every decision is tested without sleeping.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use weir::graph::execution_graph::ExecutionVertex;
use weir::runtime::network::transport::Placement;

/// A session: one registration of a TaskManager, from its `Register` until its stream ends
/// or it misses its heartbeats.
pub type SessionId = u64;

/// A registered TaskManager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskManagerInfo {
    /// Its id.
    pub id: String,
    /// Its slots.
    pub slots: u32,
    /// Where its peers open data connections.
    pub data_address: SocketAddr,
    /// When it was last heard of.
    pub last_heartbeat: Instant,
}

/// The live sessions.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: BTreeMap<SessionId, TaskManagerInfo>,
    next: SessionId,
}

impl Registry {
    /// Registers `info` as a new session. A TaskManager registering again under the same
    /// id (it restarted, or reconnected) replaces its old session, which is returned: the
    /// old one is lost.
    pub fn register(&mut self, info: TaskManagerInfo) -> (SessionId, Option<SessionId>) {
        let replaced = self
            .sessions
            .iter()
            .find(|(_, s)| s.id == info.id)
            .map(|(id, _)| *id);
        if let Some(old) = replaced {
            self.sessions.remove(&old);
        }
        self.next += 1;
        self.sessions.insert(self.next, info);
        (self.next, replaced)
    }

    /// The session is alive at `now`; false if it is not a live session.
    pub fn heartbeat(&mut self, session: SessionId, now: Instant) -> bool {
        match self.sessions.get_mut(&session) {
            Some(info) => {
                info.last_heartbeat = info.last_heartbeat.max(now);
                true
            }
            None => false,
        }
    }

    /// Ends a session; returns its TaskManager if it was live.
    pub fn remove(&mut self, session: SessionId) -> Option<TaskManagerInfo> {
        self.sessions.remove(&session)
    }

    /// The session's TaskManager, if it is live.
    pub fn get(&self, session: SessionId) -> Option<&TaskManagerInfo> {
        self.sessions.get(&session)
    }

    /// The live session of TaskManager `id`.
    pub fn session_of(&self, id: &str) -> Option<SessionId> {
        self.sessions
            .iter()
            .find(|(_, s)| s.id == id)
            .map(|(session, _)| *session)
    }

    /// Sessions not heard of for longer than `timeout` at `now`.
    pub fn expired(&self, now: Instant, timeout: Duration) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_heartbeat) > timeout)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Every live session.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, &TaskManagerInfo)> {
        self.sessions.iter().map(|(id, s)| (*id, s))
    }

    /// Slots offered by the live sessions.
    pub fn total_slots(&self) -> u32 {
        self.sessions.values().map(|s| s.slots).sum()
    }
}

/// Slots a job needs with slot sharing: one slot holds one subtask of every vertex, so as
/// many as the largest parallelism.
pub fn slots_needed(vertices: &[ExecutionVertex]) -> u32 {
    vertices.iter().map(|v| v.parallelism).max().unwrap_or(0)
}

/// Places the subtasks of `vertices` on `taskmanagers` (id and slots): subtask `i` of every
/// vertex goes to slot `i` (slot sharing, as in Flink), and slots are dealt round-robin over
/// the TaskManagers in id order, so that the work spreads evenly. `None` if they offer too
/// few slots.
pub fn place(vertices: &[ExecutionVertex], taskmanagers: &[(String, u32)]) -> Option<Placement> {
    let needed = slots_needed(vertices) as usize;
    let mut sorted: Vec<(String, u32)> = taskmanagers.to_vec();
    sorted.sort();
    let mut free: Vec<u32> = sorted.iter().map(|(_, s)| *s).collect();
    let mut slot_host = Vec::with_capacity(needed);
    let mut next = 0;
    while slot_host.len() < needed {
        let host = (0..sorted.len())
            .map(|k| (next + k) % sorted.len())
            .find(|&t| free[t] > 0)?;
        free[host] -= 1;
        slot_host.push(host);
        next = host + 1;
    }
    let mut placement = HashMap::new();
    for v in vertices {
        placement.insert(v.id, sorted[slot_host[v.id.subtask as usize]].0.clone());
    }
    Some(placement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::graph::execution_graph::SubtaskRef;
    use weir::graph::ids::JobVertexId;
    use weir::state::key_group::KeyGroupRange;

    fn vertices(parallelisms: &[u32]) -> Vec<ExecutionVertex> {
        parallelisms
            .iter()
            .enumerate()
            .flat_map(|(v, &p)| {
                (0..p).map(move |i| ExecutionVertex {
                    id: SubtaskRef {
                        vertex: JobVertexId(v as u32),
                        subtask: i,
                    },
                    parallelism: p,
                    name: format!("v{v} ({}/{p})", i + 1),
                    key_groups: KeyGroupRange { start: 0, end: 0 },
                })
            })
            .collect()
    }

    fn info(id: &str, at: Instant) -> TaskManagerInfo {
        TaskManagerInfo {
            id: id.into(),
            slots: 2,
            data_address: "127.0.0.1:1".parse().unwrap(),
            last_heartbeat: at,
        }
    }

    #[test]
    fn subtasks_share_slots_and_spread_over_taskmanagers() {
        let vs = vertices(&[3, 2, 3]);
        assert_eq!(slots_needed(&vs), 3);
        let tms = [
            ("tm-b".to_string(), 1),
            ("tm-a".to_string(), 1),
            ("tm-c".to_string(), 1),
        ];
        let placement = place(&vs, &tms).unwrap();
        let at = |v: u32, i: u32| {
            placement[&SubtaskRef {
                vertex: JobVertexId(v),
                subtask: i,
            }]
                .as_str()
        };
        // Slot i holds subtask i of every vertex; slots go to tm-a, tm-b, tm-c in turn.
        for v in [0, 2] {
            assert_eq!([at(v, 0), at(v, 1), at(v, 2)], ["tm-a", "tm-b", "tm-c"]);
        }
        assert_eq!([at(1, 0), at(1, 1)], ["tm-a", "tm-b"]);
    }

    #[test]
    fn too_few_slots_place_nothing_and_full_taskmanagers_are_skipped() {
        let vs = vertices(&[4]);
        assert!(place(&vs, &[("a".into(), 1), ("b".into(), 2)]).is_none());
        let placement = place(&vs, &[("a".into(), 1), ("b".into(), 3)]).unwrap();
        let mut hosts: Vec<&str> = (0..4)
            .map(|i| {
                placement[&SubtaskRef {
                    vertex: JobVertexId(0),
                    subtask: i,
                }]
                    .as_str()
            })
            .collect();
        hosts.sort();
        assert_eq!(hosts, ["a", "b", "b", "b"]);
    }

    #[test]
    fn silent_sessions_expire_and_a_reregistration_replaces_the_old_session() {
        let start = Instant::now();
        let mut registry = Registry::default();
        let (a, _) = registry.register(info("tm-a", start));
        let (b, _) = registry.register(info("tm-b", start));
        assert_eq!(registry.total_slots(), 4);
        let timeout = Duration::from_secs(10);
        assert!(registry.heartbeat(a, start + Duration::from_secs(8)));
        assert_eq!(
            registry.expired(start + Duration::from_secs(11), timeout),
            vec![b]
        );
        assert!(registry
            .expired(start + Duration::from_secs(9), timeout)
            .is_empty());
        let (a2, replaced) = registry.register(info("tm-a", start + Duration::from_secs(12)));
        assert_eq!(replaced, Some(a));
        assert!(
            !registry.heartbeat(a, start + Duration::from_secs(13)),
            "a stale session"
        );
        assert_eq!(registry.session_of("tm-a"), Some(a2));
        assert_eq!(registry.remove(b).map(|i| i.id), Some("tm-b".to_string()));
        assert_eq!(registry.total_slots(), 2);
    }
}
