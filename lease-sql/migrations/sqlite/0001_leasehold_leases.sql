-- leasehold-sql lease table (sqlite). The same DDL `SqlStrategy::ensure_table` runs;
-- one row per (pool, slot). token NULL = free; fence grows on every claim, never on renew;
-- times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' from strftime(..., 'now').
-- Rows are created by `SqlStrategy::ensure_pool` (or on first acquisition of a pool).
CREATE TABLE IF NOT EXISTS "leasehold_leases" (
    pool        TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    token       BLOB,
    fence       INTEGER NOT NULL DEFAULT 0,
    holder      TEXT,
    expires_at  TEXT,
    acquired_at TEXT,
    renewed_at  TEXT,
    PRIMARY KEY (pool, slot)
);
