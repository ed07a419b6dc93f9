-- leasehold-sql lease table (mysql). The same DDL `SqlStrategy::ensure_table` runs;
-- one row per (pool, slot). token NULL = free; fence grows on every claim, never on renew;
-- times are the server's CURRENT_TIMESTAMP(6), sessions run in UTC (time_zone = '+00:00').
-- Rows are created by `SqlStrategy::ensure_pool` (or on first acquisition of a pool).
CREATE TABLE IF NOT EXISTS `leasehold_leases` (
    pool        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    slot        INT UNSIGNED    NOT NULL,
    token       BINARY(16)      NULL,
    fence       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holder      VARCHAR(255) CHARACTER SET utf8mb4 NULL,
    expires_at  DATETIME(6)     NULL,
    acquired_at DATETIME(6)     NULL,
    renewed_at  DATETIME(6)     NULL,
    PRIMARY KEY (pool, slot)
) ENGINE = InnoDB;
