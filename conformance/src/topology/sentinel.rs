//! Valkey/Redis: a primary, a replica and three Sentinels.
