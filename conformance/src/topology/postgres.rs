//! PostgreSQL: a primary and a streaming standby.
