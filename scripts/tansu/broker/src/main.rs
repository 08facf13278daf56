//! tansu 0.6.0's broker without the rest of its command line (cat, perf, proxy, ...), which
//! Weir's tests never use: `tansu broker --listener-url URL --advertised-listener-url URL
//! --storage-engine URL [--authentication]`, as the full `tansu` binary takes them.
use std::{error::Error, process::ExitCode};

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
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Arguments, String> {
    if args.next().as_deref() != Some("broker") {
        return Err("usage: tansu broker --listener-url URL --advertised-listener-url URL --storage-engine URL [--authentication]".into());
    }
    let (mut listener, mut advertised_listener, mut storage_engine) = (None, None, None);
    let mut authentication = false;
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
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Arguments {
        listener: listener.ok_or("--listener-url is required")?,
        advertised_listener: advertised_listener.ok_or("--advertised-listener-url is required")?,
        storage_engine: storage_engine.ok_or("--storage-engine is required")?,
        authentication,
    })
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tansu {} (broker only)", env!("CARGO_PKG_VERSION"));
        return Ok(ExitCode::SUCCESS);
    }
    let arguments = parse(std::env::args().skip(1))?;
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
        .build()
        .await?;
    let code = broker.main(started).await?;
    println!("tansu broker stopped: {code:?}");
    Ok(ExitCode::SUCCESS)
}
