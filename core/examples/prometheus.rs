//! The driver's metrics as Prometheus text, on `http://127.0.0.1:9464/metrics`.
//!
//! ```sh
//! cargo run -p leasehold-core --features tokio,metrics --example prometheus -- --for-secs 5
//! curl -s http://127.0.0.1:9464/metrics | grep leasehold_
//! ```
//!
//! A lease on the in-process store is held and renewed every 100 ms; the
//! exporter renders the metrics the `metrics` facade collected. Any exporter
//! of the `metrics` ecosystem works the same way.

use std::time::Duration;

use leasehold_core::{LeaseConfig, LeaseManager, Memory};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let for_secs = std::env::args()
        .skip_while(|a| a != "--for-secs")
        .nth(1)
        .map(|s| s.parse::<u64>())
        .transpose()?;
    let handle = PrometheusBuilder::new().install_recorder()?;
    let config = LeaseConfig::builder("machine-ids")
        .ttl(Duration::from_secs(3))
        .renew_interval(Duration::from_millis(100))
        .build()?;
    let manager = LeaseManager::start(Memory::new(), config).await?;
    let listener = TcpListener::bind("127.0.0.1:9464").await?;
    println!(
        "holding slot {}; metrics on http://{}/metrics",
        manager.gate().view().slot,
        listener.local_addr()?
    );
    let serve = async {
        loop {
            let (mut conn, _) = listener.accept().await?;
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request).await?;
            let body = handle.render();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(response.as_bytes()).await?;
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    let stop = async {
        match for_secs {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::select! {
        r = serve => r?,
        () = stop => {}
    }
    print!("{}", handle.render());
    manager.shutdown().await;
    Ok(())
}
