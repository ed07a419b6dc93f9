#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "tokio")]
mod asynch;
mod cipher;
mod encrypted;
mod engine;
mod error;
mod generator;
mod layout;
mod nonce;
mod time;
mod uuid7;
mod width;

#[doc(hidden)]
pub use cipher::BlockPermutation;
pub use cipher::{BaseKey, KeyError};
pub use encrypted::Encrypted;
pub use error::{
    BuildError, FillError, GenerateError, LayoutError, ParseError, TryNextError, WaitReason,
};
pub use generator::{Counter, Plain, Sortable};
pub use layout::{DEFAULT_EPOCH_UNIX_MS, Layout, LayoutBuilder, OverflowWarning, Parts};
pub use nonce::{Base32, Nonce64, Nonce96, Nonce128};
pub use time::{AsClock, FastClock, ManualTime, PreciseClock, Reading, TimeSource};
pub use uuid7::Uuid7;
pub use width::{W64, W96, W128, Width};

/// Counter nonces, 64 bits: the fastest; may burst on saved-up milliseconds.
pub type Counter64<T = FastClock> = Counter<W64, T>;
/// Counter nonces, 96 bits.
pub type Counter96<T = FastClock> = Counter<W96, T>;
/// Counter nonces, 128 bits.
pub type Counter128<T = FastClock> = Counter<W128, T>;
/// Sortable (Snowflake-like) nonces, 64 bits: at most 2^13 per millisecond by default.
pub type Sortable64<T = FastClock> = Sortable<W64, T>;
/// Sortable nonces, 96 bits.
pub type Sortable96<T = FastClock> = Sortable<W96, T>;
/// Sortable nonces, 128 bits; also rendered as UUIDv7.
pub type Sortable128<T = FastClock> = Sortable<W128, T>;
