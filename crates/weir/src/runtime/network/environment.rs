//! A TaskManager's side of the data plane: the socket it listens on for its peers, and the
//! connections of one run of the job.
//!
//! For each run, every pair of TaskManagers that exchange records has one connection: the
//! one whose id sorts first dials, the other accepts. A dialer introduces itself with the
//! job graph's fingerprint, the run and its id; a fingerprint from other code is refused, and
//! an accepted connection waits, keyed by run and peer, until the local run picks it up.
//! Connections of older runs that nobody picked up are dropped.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::connection::Connection;
use super::frame::{answer_handshake, dial_handshake, read_hello, Hello, RunId};
use super::NetworkError;

/// Settings of the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// The largest frame accepted (`network.max-frame-bytes`): a batch larger than this
    /// fails its channel rather than letting a corrupt length field allocate without bound.
    pub max_frame_bytes: usize,
    /// How long a run waits for its peers' connections (`network.connect-timeout`).
    pub connect_timeout: Duration,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: 256 * 1024 * 1024,
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// How long an accepted socket may take to introduce itself.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

type Pending = Arc<(Mutex<HashMap<(RunId, String), TcpStream>>, Condvar)>;

/// A TaskManager's listening socket and the connections waiting to be picked up.
pub struct NetworkEnvironment {
    id: String,
    address: SocketAddr,
    job_fingerprint: u64,
    config: NetworkConfig,
    pending: Pending,
    stopped: Arc<AtomicBool>,
}

impl NetworkEnvironment {
    /// Listens on `bind` for the data connections of TaskManager `id`, accepting only peers
    /// built from the job graph with `job_fingerprint`.
    pub fn bind(
        id: impl Into<String>,
        bind: SocketAddr,
        job_fingerprint: u64,
        config: NetworkConfig,
    ) -> Result<Self, NetworkError> {
        let listener = TcpListener::bind(bind).map_err(|source| NetworkError::Io {
            what: format!("listening for data connections on {bind} (taskmanager.data.port)"),
            cause: source,
        })?;
        let address = listener.local_addr().map_err(|source| NetworkError::Io {
            what: "reading the data port's address".into(),
            cause: source,
        })?;
        let environment = Self {
            id: id.into(),
            address,
            job_fingerprint,
            config,
            pending: Arc::default(),
            stopped: Arc::default(),
        };
        let (pending, stopped) = (environment.pending.clone(), environment.stopped.clone());
        std::thread::Builder::new()
            .name(format!("net-accept {}", environment.id))
            .spawn(move || accept_loop(listener, job_fingerprint, &pending, &stopped))
            .map_err(|source| NetworkError::Io {
                what: "starting the data port's accept thread".into(),
                cause: source,
            })?;
        Ok(environment)
    }

    /// The address peers dial.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// This TaskManager's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The data plane's settings.
    pub fn config(&self) -> &NetworkConfig {
        &self.config
    }

    /// Opens the connections of `run` to `peers` (id and data address): dials those whose
    /// id sorts after this one's and waits for the others to dial, each within the connect
    /// timeout.
    pub fn connect_run(
        &self,
        run: RunId,
        peers: &BTreeMap<String, SocketAddr>,
    ) -> Result<RunConnections, NetworkError> {
        self.drop_older_than(run);
        let deadline = Instant::now() + self.config.connect_timeout;
        let mut connections = HashMap::new();
        for (peer, address) in peers.iter().filter(|(p, _)| **p != self.id) {
            let name = format!("TaskManager `{peer}` ({address})");
            let stream = if self.id < *peer {
                self.dial(run, &name, *address, deadline)?
            } else {
                self.await_dial(run, peer, deadline)?
            };
            connections.insert(
                peer.clone(),
                Connection::start(stream, name, self.config.max_frame_bytes)?,
            );
        }
        Ok(RunConnections { connections })
    }

    fn dial(
        &self,
        run: RunId,
        name: &str,
        address: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpStream, NetworkError> {
        let hello = Hello {
            job_fingerprint: self.job_fingerprint,
            run,
            from: self.id.clone(),
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = TcpStream::connect_timeout(&address, left.max(Duration::from_millis(1)))
                .map_err(|source| NetworkError::Io {
                    what: format!("connecting to {name}"),
                    cause: source,
                })
                .and_then(|mut stream| {
                    stream
                        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
                        .map_err(|source| NetworkError::Io {
                            what: format!("setting a timeout on the connection to {name}"),
                            cause: source,
                        })?;
                    dial_handshake(&mut stream, &hello, name)?;
                    Ok(stream)
                });
            match attempt {
                Ok(stream) => return Ok(stream),
                // A refusal is final; a peer not listening yet may be starting.
                Err(e @ NetworkError::Handshake { .. }) => return Err(e),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "data connection not up yet; retrying");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn await_dial(
        &self,
        run: RunId,
        peer: &str,
        deadline: Instant,
    ) -> Result<TcpStream, NetworkError> {
        let (lock, ready) = &*self.pending;
        let key = (run, peer.to_string());
        let mut pending = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(stream) = pending.remove(&key) {
                return Ok(stream);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NetworkError::Timeout {
                    peer: peer.to_string(),
                    timeout: self.config.connect_timeout,
                    run: run.to_string(),
                });
            }
            pending = ready
                .wait_timeout(pending, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn drop_older_than(&self, run: RunId) {
        let (lock, _) = &*self.pending;
        lock.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(r, _), _| *r >= run);
    }
}

impl Drop for NetworkEnvironment {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept thread so that it sees the flag and releases the port.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_millis(200));
    }
}

fn accept_loop(listener: TcpListener, fingerprint: u64, pending: &Pending, stopped: &AtomicBool) {
    for stream in listener.incoming() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            // Out of descriptors, say: wait instead of spinning.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let pending = pending.clone();
        // A slow or foreign client must not hold up the others' handshakes.
        let _ = std::thread::Builder::new()
            .name("net-handshake".into())
            .spawn(move || {
                if let Err(e) = accept_one(stream, fingerprint, &pending) {
                    tracing::warn!(error = %e, "refused a data connection");
                }
            });
    }
}

fn accept_one(
    mut stream: TcpStream,
    fingerprint: u64,
    pending: &Pending,
) -> Result<(), NetworkError> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "an unknown peer".to_string(), |a| a.to_string());
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|source| NetworkError::Io {
            what: format!("setting a timeout on the connection from {peer}"),
            cause: source,
        })?;
    let hello = read_hello(&mut stream, &peer)?;
    let answer = if hello.job_fingerprint == fingerprint {
        Ok(())
    } else {
        Err(format!(
            "TaskManager `{}` was built from another job graph (fingerprint {:016x}, expected {fingerprint:016x})",
            hello.from, hello.job_fingerprint
        ))
    };
    answer_handshake(&mut stream, &answer).map_err(|source| NetworkError::Io {
        what: format!("answering {peer}"),
        cause: source,
    })?;
    if let Err(reason) = answer {
        return Err(NetworkError::Handshake { peer, reason });
    }
    let (lock, ready) = &**pending;
    lock.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((hello.run, hello.from), stream);
    ready.notify_all();
    Ok(())
}

/// The connections of one run, by peer TaskManager id.
pub struct RunConnections {
    connections: HashMap<String, Connection>,
}

impl RunConnections {
    /// The connection to `peer`.
    pub fn get(&self, peer: &str) -> Result<&Connection, NetworkError> {
        self.connections
            .get(peer)
            .ok_or_else(|| NetworkError::NoConnection(peer.to_string()))
    }

    /// Every channel is registered: the connections close once their channels are done.
    pub fn seal(&mut self) {
        self.connections.values_mut().for_each(Connection::seal);
    }

    /// Cuts every connection (the run is cancelled).
    pub fn shutdown(&self, reason: &str) {
        self.connections.values().for_each(|c| c.shutdown(reason));
    }

    /// The first failure of a connection, naming its peer.
    pub fn failure(&self) -> Option<String> {
        self.connections
            .values()
            .find_map(|c| c.failure().map(|f| format!("{}: {f}", c.peer())))
    }
}
