-- leasehold-sql lease table (postgres). The same DDL `SqlStrategy::ensure_table` runs;
-- one row per (pool, slot). token NULL = free; fence grows on every claim, never on renew;
-- times are the server's CURRENT_TIMESTAMP(6).
-- Rows are created by `SqlStrategy::ensure_pool` (or on first acquisition of a pool).
CREATE TABLE IF NOT EXISTS "leasehold_leases" (
    pool        VARCHAR(64)  NOT NULL,
    slot        INTEGER      NOT NULL,
    token       BYTEA,
    fence       BIGINT       NOT NULL DEFAULT 0,
    holder      VARCHAR(255),
    expires_at  TIMESTAMPTZ(6),
    acquired_at TIMESTAMPTZ(6),
    renewed_at  TIMESTAMPTZ(6),
    PRIMARY KEY (pool, slot)
);
