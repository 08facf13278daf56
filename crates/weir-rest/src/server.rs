//! The REST endpoint's server: its own small tokio runtime on a thread of its own, so that
//! a job binary without an async runtime can serve it, HTTP or HTTPS (rustls), with the
//! optional bearer-token check in front of every route.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::sync::oneshot;

use crate::api;
use crate::auth::{require_token, RequiredToken};
use crate::config::RestConfig;
use crate::dashboard;
use crate::dispatcher::Dispatcher;
use crate::error::RestError;
use crate::tls;

/// A running REST endpoint; stopped when dropped.
pub struct RestServer {
    address: SocketAddr,
    https: bool,
    dispatcher: Arc<Dispatcher>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestServer")
            .field("address", &self.address)
            .field("https", &self.https)
            .finish()
    }
}

/// The application: API routes, the dashboard, and the token check over both.
pub fn router(dispatcher: Arc<Dispatcher>, token: Option<&str>) -> Router {
    let api = api::routes().with_state(dispatcher.clone());
    let api = match token {
        Some(token) => api.layer(axum::middleware::from_fn_with_state(
            RequiredToken(token.into()),
            require_token,
        )),
        None => api,
    };
    // The dashboard's page and assets hold no data (a browser cannot send a bearer header
    // when it navigates); everything they show comes from the API, with the token.
    api.merge(dashboard::routes().with_state(dispatcher))
}

impl RestServer {
    /// Binds `config`'s address and serves `dispatcher`'s jobs until dropped. A port that
    /// is taken, or a TLS file that is unusable, is an error here, before anything runs.
    pub fn start(config: &RestConfig, dispatcher: Arc<Dispatcher>) -> Result<Self, RestError> {
        let address = SocketAddr::new(config.bind_address, config.port);
        let tls = config.tls.as_ref().map(tls::server_config).transpose()?;
        let listener = std::net::TcpListener::bind(address)
            .map_err(|source| RestError::Bind { address, source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| RestError::Bind { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| RestError::Bind { address, source })?;
        let app = router(dispatcher.clone(), config.token.as_deref());
        let (shutdown, stopped) = oneshot::channel::<()>();
        let https = tls.is_some();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(4)
            .thread_name("rest")
            .enable_all()
            .build()
            .map_err(|e| RestError::Start(format!("cannot start its runtime: {e}")))?;
        let thread = std::thread::Builder::new()
            .name("rest-endpoint".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            tracing::error!(error = %e, "the REST endpoint cannot listen");
                            return;
                        }
                    };
                    match tls {
                        None => {
                            let serving =
                                axum::serve(listener, app).with_graceful_shutdown(async {
                                    let _ = stopped.await;
                                });
                            if let Err(e) = serving.await {
                                tracing::error!(error = %e, "the REST endpoint stopped");
                            }
                        }
                        Some(tls) => tls::serve(listener, app, tls, stopped).await,
                    }
                });
                runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            })
            .map_err(|e| RestError::Start(format!("cannot start its thread: {e}")))?;
        let scheme = if https { "https" } else { "http" };
        tracing::info!(url = %format!("{scheme}://{address}/"), "REST endpoint and dashboard listening");
        Ok(Self {
            address,
            https,
            dispatcher,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen, for `rest.port: 0`).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its base URL, `http://host:port` or `https://host:port`.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// The jobs it serves.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// Stops serving and waits for the server's thread.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}
