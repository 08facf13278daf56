//! A TCP proxy that cuts connections: it forwards everything between its clients and a
//! target, and cuts chosen connections (both directions, at once) after a number of bytes,
//! as a broken network link or a dying router would.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A running proxy; it stops accepting when dropped.
pub struct FaultProxy {
    /// Where clients connect.
    pub address: std::net::SocketAddr,
    /// Connections cut so far.
    pub cuts: Arc<AtomicU64>,
    stopped: Arc<AtomicBool>,
}

impl FaultProxy {
    /// Proxies `listen` (127.0.0.1:port) to `target`; connection `n` (counting from 0) is
    /// cut after `after_bytes` bytes, in either direction, when `cut(n)` is true.
    pub fn start(
        listen: &str,
        target: std::net::SocketAddr,
        after_bytes: u64,
        cut: impl Fn(u64) -> bool + Send + 'static,
    ) -> Self {
        let listener = TcpListener::bind(listen).expect("the proxy cannot listen");
        let address = listener.local_addr().expect("no proxy address");
        let cuts = Arc::new(AtomicU64::new(0));
        let stopped = Arc::new(AtomicBool::new(false));
        {
            let (cuts, stopped) = (cuts.clone(), stopped.clone());
            std::thread::spawn(move || {
                for (n, client) in listener.incoming().enumerate() {
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(target) else {
                        continue;
                    };
                    let budget = cut(n as u64).then_some(after_bytes);
                    let cuts = cuts.clone();
                    std::thread::spawn(move || pump_pair(client, server, budget, &cuts));
                }
            });
        }
        Self {
            address,
            cuts,
            stopped,
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.address);
    }
}

/// Forwards both directions; with a budget, cuts both sockets once that many bytes passed.
fn pump_pair(client: TcpStream, server: TcpStream, budget: Option<u64>, cuts: &Arc<AtomicU64>) {
    let passed = Arc::new(AtomicU64::new(0));
    let cut = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for (from, to) in [(&client, &server), (&server, &client)] {
        let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
            return;
        };
        let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) else {
            return;
        };
        let (passed, cut, cuts) = (passed.clone(), cut.clone(), cuts.clone());
        handles.push(std::thread::spawn(move || {
            let mut buffer = [0u8; 16 * 1024];
            loop {
                let n = match from.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let total = passed.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                if budget.is_some_and(|b| total > b) {
                    if !cut.swap(true, Ordering::SeqCst) {
                        cuts.fetch_add(1, Ordering::SeqCst);
                    }
                    // Both sockets at once: each side sees its connection reset mid-stream.
                    let _ = a.shutdown(Shutdown::Both);
                    let _ = b.shutdown(Shutdown::Both);
                    return;
                }
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        }));
    }
    for handle in handles {
        let _ = handle.join();
    }
}
