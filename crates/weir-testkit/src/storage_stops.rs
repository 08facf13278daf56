//! Stop points at object-storage requests, as [`crate::crash_points`] has them at file
//! operations: an HTTP proxy between one process and the S3-compatible server counts the
//! requests that change storage (`PUT`, `POST`, `DELETE`) and, right before forwarding the
//! N-th, stops the process (SIGSTOP) and holds that request until the test releases it. The
//! request reaches storage only after the process was stalled for as long as the test
//! chose, as when a process pauses between deciding to write and the write landing. A
//! counting run (no stop) lists the requests a run makes. Dropped, the proxy forwards no held
//! request: it cuts its connection.
//!
//! Point a process at the proxy with `AWS_ENDPOINT` (object_store's S3 client reads it), and
//! give it a request timeout longer than the stall ([`PROCESS_ENVIRONMENT`]): otherwise its
//! client gives up on the held request when it continues, whether or not the write landed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Environment for the process behind the proxy besides `AWS_ENDPOINT`: a request timeout of
/// an hour (object_store's default of 30 s would expire while the process is stopped, and the
/// woken process would see its held write time out instead of its answer).
pub const PROCESS_ENVIRONMENT: &[(&str, &str)] = &[("AWS_TIMEOUT", "1h")];

/// One request that changes storage, as the proxy counted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRequest {
    /// Its number among the process's storage-changing requests (1-based).
    pub n: u64,
    /// `PUT`, `POST` or `DELETE`.
    pub method: String,
    /// The request target (`/bucket/key?query`).
    pub target: String,
}

/// The head of the first complete request in a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompleteRequest {
    pub(crate) method: String,
    pub(crate) target: String,
    /// Bytes of the whole request: head and body.
    pub(crate) len: usize,
}

/// The first complete HTTP/1.1 request at the start of `buffer`, `None` while more bytes
/// are needed. Bodies are delimited by `Content-Length` or chunked transfer coding.
pub(crate) fn complete_request(buffer: &[u8]) -> Result<Option<CompleteRequest>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buffer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP request: {e}")),
    };
    let method = request.method.unwrap_or_default().to_string();
    let target = request.path.unwrap_or_default().to_string();
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let body_len = if header("transfer-encoding").is_some_and(|v| v.ends_with("chunked")) {
        match chunked_body_len(&buffer[head_len..])? {
            Some(n) => n,
            None => return Ok(None),
        }
    } else {
        match header("content-length") {
            Some(value) => value
                .parse::<usize>()
                .map_err(|_| format!("a Content-Length that is not a number: {value}"))?,
            None => 0,
        }
    };
    if buffer.len() < head_len + body_len {
        return Ok(None);
    }
    Ok(Some(CompleteRequest {
        method,
        target,
        len: head_len + body_len,
    }))
}

/// The length of a complete chunked body at the start of `body` (trailers included), `None`
/// while more bytes are needed.
fn chunked_body_len(body: &[u8]) -> Result<Option<usize>, String> {
    let mut at = 0;
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(&body[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err("a malformed chunk size".into()),
        };
        at += size_len;
        if size == 0 {
            // Trailer lines until an empty one.
            loop {
                let Some(end) = body[at..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                at += end + 2;
                if end == 0 {
                    return Ok(Some(at));
                }
            }
        }
        let size = usize::try_from(size).map_err(|_| "a chunk too large".to_string())?;
        if body.len() < at + size + 2 {
            return Ok(None);
        }
        at += size + 2;
    }
}

/// Whether a request changes storage.
fn changes_storage(method: &str) -> bool {
    matches!(method, "PUT" | "POST" | "DELETE")
}

#[derive(Default)]
struct Shared {
    /// The process to stop (0 until [`StorageStops::watch`]).
    pid: AtomicI32,
    stop_at: Option<u64>,
    requests: Mutex<Vec<StorageRequest>>,
    /// Set once the process was stopped at the point.
    stopped: AtomicBool,
    /// Set by [`StorageStops::release`]; the held request waits for it.
    released: Mutex<bool>,
    release: Condvar,
    closed: AtomicBool,
    /// What the proxy could not parse (it then forwarded the rest of that connection
    /// uncounted, so the counts are off).
    problem: Mutex<Option<String>>,
}

/// A running proxy for one process; it stops accepting (and releases a held request) when
/// dropped.
pub struct StorageStops {
    /// The endpoint to give the process (`http://127.0.0.1:port`), as `AWS_ENDPOINT`.
    pub endpoint: String,
    shared: Arc<Shared>,
    address: std::net::SocketAddr,
}

impl StorageStops {
    /// A proxy to the S3 server at `target` (an `http://host:port` endpoint, as in
    /// `AWS_ENDPOINT`) that stops the watched process right before its `stop_at`-th request
    /// that changes storage (never, if `None`: a counting run).
    pub fn start(target: &str, stop_at: Option<u64>) -> Self {
        let target_address = target
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("the proxy cannot listen");
        let address = listener.local_addr().expect("no proxy address");
        let shared = Arc::new(Shared {
            stop_at,
            ..Shared::default()
        });
        {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if shared.closed.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(&target_address) else {
                        continue;
                    };
                    let shared = shared.clone();
                    std::thread::spawn(move || proxy_connection(client, server, &shared));
                }
            });
        }
        Self {
            endpoint: format!("http://{address}"),
            shared,
            address,
        }
    }

    /// A proxy to the server in this process's `AWS_ENDPOINT` (see [`StorageStops::start`]).
    pub fn to_test_server(stop_at: Option<u64>) -> Self {
        let target = std::env::var("AWS_ENDPOINT").unwrap_or_else(|_| {
            panic!("AWS_ENDPOINT is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
        });
        Self::start(&target, stop_at)
    }

    /// Sets `command` up to go through this proxy (`AWS_ENDPOINT` and
    /// [`PROCESS_ENVIRONMENT`]).
    pub fn route(&self, command: &mut std::process::Command) {
        command.env("AWS_ENDPOINT", &self.endpoint);
        command.envs(PROCESS_ENVIRONMENT.iter().copied());
    }

    /// What the proxy could not parse, if anything: its counts are then off.
    pub fn problem(&self) -> Option<String> {
        self.shared
            .problem
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops process `pid` at the point (set right after starting it: a process makes no
    /// request before it has run a while, and a request that comes first waits for this).
    pub fn watch(&self, pid: u32) {
        self.shared
            .pid
            .store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
    }

    /// The storage-changing requests counted so far.
    pub fn requests(&self) -> Vec<StorageRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the process was stopped at the point.
    pub fn stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::SeqCst)
    }

    /// Waits until the process is stopped at the point (true), or `ended()` says it ended
    /// first or `limit` passes (false).
    pub fn wait_stopped(&self, limit: Duration, mut ended: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.stopped() {
                return true;
            }
            if ended() {
                return self.stopped();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Lets the held request go on to storage; continue the process (SIGCONT) after this.
    pub fn release(&self) {
        *self
            .shared
            .released
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.release.notify_all();
    }
}

impl Drop for StorageStops {
    fn drop(&mut self) {
        // Closed first: a held request wakes to find it must not be forwarded.
        self.shared.closed.store(true, Ordering::SeqCst);
        self.release();
        let _ = TcpStream::connect(self.address);
    }
}

/// Forwards one client connection: requests whole, counted and perhaps held; responses as
/// they come.
fn proxy_connection(client: TcpStream, server: TcpStream, shared: &Shared) {
    let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    let responses = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Write);
    });
    let (mut from_client, mut to_server) = (client, server);
    let mut buffer: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    'connection: loop {
        loop {
            match complete_request(&buffer) {
                Ok(Some(request)) => {
                    if changes_storage(&request.method) && !hold_if_at_point(shared, &request) {
                        // The proxy was dropped while it held this request: it never lands.
                        let _ = to_server.shutdown(Shutdown::Both);
                        let _ = from_client.shutdown(Shutdown::Both);
                        break 'connection;
                    }
                    if to_server.write_all(&buffer[..request.len]).is_err() {
                        break 'connection;
                    }
                    buffer.drain(..request.len);
                }
                Ok(None) => break,
                Err(problem) => {
                    eprintln!("storage stop proxy: {problem}; forwarding the rest uncounted");
                    *shared
                        .problem
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(problem);
                    let _ = to_server.write_all(&buffer);
                    let _ = std::io::copy(&mut from_client, &mut to_server);
                    break 'connection;
                }
            }
        }
        match from_client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = to_server.shutdown(Shutdown::Write);
    let _ = responses.join();
}

/// Counts `request`; at the point, stops the watched process and waits for the release.
/// Whether to forward it (not when the proxy was dropped meanwhile).
fn hold_if_at_point(shared: &Shared, request: &CompleteRequest) -> bool {
    let n = {
        let mut requests = shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = requests.len() as u64 + 1;
        requests.push(StorageRequest {
            n,
            method: request.method.clone(),
            target: request.target.clone(),
        });
        n
    };
    if shared.stop_at != Some(n) || shared.closed.load(Ordering::SeqCst) {
        return !shared.closed.load(Ordering::SeqCst);
    }
    let pid = loop {
        match shared.pid.load(Ordering::SeqCst) {
            0 if !shared.closed.load(Ordering::SeqCst) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            pid => break pid,
        }
    };
    if pid > 0 {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, libc::SIGSTOP);
        }
    }
    shared.stopped.store(true, Ordering::SeqCst);
    let mut released = shared
        .released
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    while !*released {
        released = shared
            .release
            .wait(released)
            .unwrap_or_else(PoisonError::into_inner);
    }
    !shared.closed.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_complete_once_its_body_is() {
        let put = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(complete_request(&put[..20]), Ok(None));
        assert_eq!(complete_request(&put[..put.len() - 1]), Ok(None));
        let request = complete_request(put).unwrap().unwrap();
        assert_eq!(
            (
                request.method.as_str(),
                request.target.as_str(),
                request.len
            ),
            ("PUT", "/b/k", put.len())
        );
        let mut two = put.to_vec();
        two.extend_from_slice(b"GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(complete_request(&two).unwrap().unwrap().len, put.len());
    }

    #[test]
    fn chunked_bodies_end_at_the_last_chunk_and_its_trailers() {
        let head = b"POST /b/k?uploads HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let body = b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: 1\r\n\r\n";
        let whole = [head.clone(), body.to_vec()].concat();
        for cut in head.len()..whole.len() {
            assert_eq!(complete_request(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(complete_request(&whole).unwrap().unwrap().len, whole.len());
        assert!(complete_request(b"\x16\x03\x01 not http\r\n\r\n").is_err());
    }

    #[test]
    fn only_writes_count() {
        assert!(changes_storage("PUT") && changes_storage("POST") && changes_storage("DELETE"));
        assert!(!changes_storage("GET") && !changes_storage("HEAD"));
    }

    /// A toy server answering every request with an empty 200, counting what it received.
    fn answering_server() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Ok(Some(request)) = complete_request(&buffer) {
                            log.lock().unwrap().push(request.method.clone());
                            buffer.drain(..request.len);
                            let _ =
                                stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                        }
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        (format!("http://{address}"), seen)
    }

    /// A child that merely sleeps stands in for the process to stop; killed when dropped.
    struct Sleeper(std::process::Child);

    impl Sleeper {
        fn start() -> Self {
            Self(
                std::process::Command::new("sleep")
                    .arg("60")
                    .spawn()
                    .unwrap(),
            )
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            crate::crash_points::resume(&self.0);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_dropped_proxy_forwards_no_held_request() {
        let (server, seen) = answering_server();
        let stops = StorageStops::start(&server, Some(1));
        let mut sleeper = Sleeper::start();
        stops.watch(sleeper.0.id());
        let mut client = TcpStream::connect(stops.endpoint.trim_start_matches("http://")).unwrap();
        client
            .write_all(b"PUT /b/1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(stops.wait_stopped(Duration::from_secs(10), || false));
        assert!(crate::crash_points::wait_stopped(
            &mut sleeper.0,
            Duration::from_secs(10)
        ));
        drop(stops);
        // The connection is cut, and nothing reached the server.
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest);
        assert!(rest.is_empty());
        assert!(seen.lock().unwrap().is_empty());
    }

    #[test]
    fn the_proxy_holds_the_chosen_write_until_released() {
        let (server, seen) = answering_server();
        let stops = StorageStops::start(&server, Some(2));
        let mut sleeper = Sleeper::start();
        stops.watch(sleeper.0.id());
        let address = stops.endpoint.trim_start_matches("http://").to_string();
        let mut client = TcpStream::connect(&address).unwrap();
        client
            .write_all(b"GET /b/k HTTP/1.1\r\n\r\nPUT /b/1 HTTP/1.1\r\nContent-Length: 1\r\n\r\nx")
            .unwrap();
        client
            .write_all(
                b"DELETE /b/2 HTTP/1.1\r\n\r\nPUT /b/3 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            )
            .unwrap();
        assert!(stops.wait_stopped(Duration::from_secs(10), || false));
        assert!(crate::crash_points::wait_stopped(
            &mut sleeper.0,
            Duration::from_secs(10)
        ));
        let await_seen = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen.lock().unwrap().len() < n && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        await_seen(2);
        assert_eq!(*seen.lock().unwrap(), ["GET", "PUT"], "the DELETE is held");
        stops.release();
        crate::crash_points::resume(&sleeper.0);
        await_seen(4);
        assert_eq!(*seen.lock().unwrap(), ["GET", "PUT", "DELETE", "PUT"]);
        let counted: Vec<(u64, String, String)> = stops
            .requests()
            .into_iter()
            .map(|r| (r.n, r.method, r.target))
            .collect();
        assert_eq!(
            counted,
            [
                (1, "PUT".into(), "/b/1".into()),
                (2, "DELETE".into(), "/b/2".into()),
                (3, "PUT".into(), "/b/3".into())
            ]
        );
        assert_eq!(stops.problem(), None);
    }
}
