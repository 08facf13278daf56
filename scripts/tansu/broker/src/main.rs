//! tansu 0.6.0's broker without the rest of its command line (cat, perf, proxy, ...), which
//! Weir's tests never use: `tansu broker --listener-url URL --advertised-listener-url URL
//! --storage-engine URL [--authentication] [--cert FILE --key FILE [--client-ca FILE]]`, as
//! the full `tansu` binary takes them. With `--cert` and `--key` (PEM files) the listener
//! serves TLS itself: tansu 0.6.0 builds the acceptor but never uses it, which
//! tls-listener.patch mends. With `--client-ca` it also requires every client to present a
//! certificate signed by that CA (mutual TLS, Kafka's `ssl.client.auth=required`), which
//! tansu 0.6.0 has no option for.
use std::{error::Error, path::PathBuf, process::ExitCode, sync::Arc};

use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

use tansu_broker::{
    NODE_ID, TracingFormat, broker::Broker, coordinator::group::administrator::Controller, otel,
};
use tansu_storage::StorageContainer;
use tokio::time::Instant;
use url::Url;
use uuid::Uuid;

struct Arguments {
    listener: Url,
    advertised_listener: Url,
    storage_engine: Url,
    authentication: bool,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
}

const USAGE: &str = "usage: tansu broker --listener-url URL --advertised-listener-url URL --storage-engine URL [--authentication] [--cert FILE --key FILE [--client-ca FILE]]";

fn parse(mut args: impl Iterator<Item = String>) -> Result<Arguments, String> {
    if args.next().as_deref() != Some("broker") {
        return Err(USAGE.into());
    }
    let (mut listener, mut advertised_listener, mut storage_engine) = (None, None, None);
    let mut authentication = false;
    let (mut cert, mut key, mut client_ca) = (None, None, None);
    while let Some(flag) = args.next() {
        let mut url = || -> Result<Option<Url>, String> {
            let value = args.next().ok_or(format!("{flag} needs a URL"))?;
            Url::parse(&value)
                .map(Some)
                .map_err(|err| format!("{flag} {value}: {err}"))
        };
        match flag.as_str() {
            "--listener-url" => listener = url()?,
            "--advertised-listener-url" => advertised_listener = url()?,
            "--storage-engine" => storage_engine = url()?,
            "--authentication" => authentication = true,
            "--cert" => cert = Some(PathBuf::from(args.next().ok_or("--cert needs a file")?)),
            "--key" => key = Some(PathBuf::from(args.next().ok_or("--key needs a file")?)),
            "--client-ca" => {
                client_ca = Some(PathBuf::from(
                    args.next().ok_or("--client-ca needs a file")?,
                ))
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Arguments {
        listener: listener.ok_or("--listener-url is required")?,
        advertised_listener: advertised_listener.ok_or("--advertised-listener-url is required")?,
        storage_engine: storage_engine.ok_or("--storage-engine is required")?,
        authentication,
        cert,
        key,
        client_ca,
    })
}

/// The certificates of a PEM file, named by the flag that gave it in errors.
fn certificates(flag: &str, file: &PathBuf) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| format!("{flag} {}: {err}", file.display()))
}

/// The TLS configuration of `--cert` and `--key`: the certificate chain and its private key,
/// PEM, with aws-lc-rs (tansu's own rustls provider) named so no process default is needed.
/// With `client_ca`, a client without a certificate that CA signed is refused in the
/// handshake.
fn tls_server_config(
    cert: &PathBuf,
    key: &PathBuf,
    client_ca: Option<&PathBuf>,
) -> Result<ServerConfig, Box<dyn Error>> {
    let chain = certificates("--cert", cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|err| format!("--key {}: {err}", key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(file) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates("--client-ca", file)? {
                roots
                    .add(ca)
                    .map_err(|err| format!("--client-ca {}: {err}", file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| format!("--client-ca {}: {err}", file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(builder.with_single_cert(chain, key)?)
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tansu {} (broker only)", env!("CARGO_PKG_VERSION"));
        return Ok(ExitCode::SUCCESS);
    }
    let arguments = parse(std::env::args().skip(1))?;
    let tls = match (&arguments.cert, &arguments.key) {
        (Some(cert), Some(key)) => Some(tls_server_config(
            cert,
            key,
            arguments.client_ca.as_ref(),
        )?),
        (None, None) if arguments.client_ca.is_none() => None,
        (None, None) => return Err("--client-ca needs --cert and --key".into()),
        _ => return Err("--cert and --key go together".into()),
    };
    let _guard = otel::init(TracingFormat::Text)?;
    let started = Instant::now();
    let broker = Broker::<Controller<StorageContainer>, StorageContainer>::builder()
        .node_id(NODE_ID)
        .cluster_id("tansu_cluster")
        .incarnation_id(Uuid::now_v7())
        .advertised_listener(arguments.advertised_listener)
        .storage(arguments.storage_engine)
        .listener(arguments.listener)
        .authentication(arguments.authentication)
        .tls_server_config(tls)
        .build()
        .await?;
    let code = broker.main(started).await?;
    println!("tansu broker stopped: {code:?}");
    Ok(ExitCode::SUCCESS)
}
