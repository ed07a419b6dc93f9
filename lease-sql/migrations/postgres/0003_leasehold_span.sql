-- leasehold-sql 0.3 (postgres): the restart span of every slot (DESIGN.md, timing rule 12).
-- span_ms: the longest TTL plus twice max_clock_skew (ms) of any holder that claimed the slot.
-- After a server that can forget acknowledged writes restarts, claims wait the largest
-- span_ms of the pool, so a holder with a longer TTL or skew than the claimer is waited out.
-- Apply after 0002. `SqlStrategy::ensure_table` (and `ensure_pool`) run the same statement
-- by themselves. Existing rows keep their leases, fences and floors and get span 0.
ALTER TABLE "leasehold_leases" ADD COLUMN span_ms BIGINT NOT NULL DEFAULT 0;
