//! Connecting without a password in the URL: from a password file, read
//! again for every new connection (a rotated Kubernetes Secret takes effect
//! without a restart), and from a callback asked for every new connection
//! (short-lived tokens such as RDS IAM authentication tokens).
//!
//! ```sh
//! cargo run -p leasehold --features postgres --example credentials -- \
//!     postgres://app@db:5432/app /run/secrets/db/password
//! ```

use std::path::{Path, PathBuf};

use leasehold::StoreConfig;
use leasehold::credentials::Credentials;

/// A token for the next connection. Here it is read from a file; in
/// production it comes from your token service (for RDS, a signed
/// `rds-db:connect` request made with the AWS SDK).
async fn fresh_token(path: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim_end().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(secret)) = (args.next(), args.next()) else {
        eprintln!("usage: credentials URL PASSWORD_FILE (a URL without a password)");
        std::process::exit(2);
    };
    let secret = PathBuf::from(secret);

    // ANCHOR: file
    let store = StoreConfig::from_url(&url)?
        .password_file(&secret)
        .connect()
        .await?;
    // ANCHOR_END: file
    println!("with a password file: {}", store.operator().describe());

    // ANCHOR: callback
    let token_file = secret.clone();
    let store = StoreConfig::from_url(&url)?
        .credentials(move || {
            let token_file = token_file.clone();
            async move {
                Ok::<_, std::io::Error>(Credentials::new("app", fresh_token(&token_file).await?))
            }
        })
        .connect()
        .await?;
    // ANCHOR_END: callback
    println!("with a callback: {}", store.shown_url());
    Ok(())
}
