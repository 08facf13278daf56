//! HTTPS for the REST endpoint: a rustls server configuration from PEM files, and a
//! connection loop that does the TLS handshake before handing each connection to hyper.

use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::config::TlsFiles;
use crate::error::RestError;

fn tls_error(path: &std::path::Path, key: &'static str, reason: impl Into<String>) -> RestError {
    RestError::Tls {
        path: path.to_path_buf(),
        key,
        reason: reason.into(),
    }
}

/// The rustls server configuration of `files`.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, RestError> {
    const CERT_KEY: &str = "security.ssl.rest.cert-file";
    const KEY_KEY: &str = "security.ssl.rest.key-file";
    let certs =
        std::fs::read(&files.cert).map_err(|e| tls_error(&files.cert, CERT_KEY, e.to_string()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut certs.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            tls_error(
                &files.cert,
                CERT_KEY,
                format!("not a PEM certificate chain: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(tls_error(&files.cert, CERT_KEY, "holds no PEM certificate"));
    }
    let key =
        std::fs::read(&files.key).map_err(|e| tls_error(&files.key, KEY_KEY, e.to_string()))?;
    let key = rustls_pemfile::private_key(&mut key.as_slice())
        .map_err(|e| tls_error(&files.key, KEY_KEY, format!("not a PEM private key: {e}")))?
        .ok_or_else(|| tls_error(&files.key, KEY_KEY, "holds no PEM private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(&files.cert, CERT_KEY, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            tls_error(
                &files.key,
                KEY_KEY,
                format!("does not match the certificate: {e}"),
            )
        })?;
    Ok(Arc::new(config))
}

/// Serves `app` over TLS on `listener` until `stopped`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Arc<rustls::ServerConfig>,
    mut stopped: oneshot::Receiver<()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "the REST endpoint cannot accept a connection");
                    continue;
                }
            },
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request| app.clone().oneshot(request));
            if let Err(e) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "REST connection ended with an error");
            }
        });
    }
}
