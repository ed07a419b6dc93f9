-- leasehold-sql 0.2 (sqlite): the hand-over floor of every slot (DESIGN.md, timing rule 8).
-- floor_ms: the highest timestamp (Unix ms) any holder of the slot may have put into an ID;
-- grant_floor_ms: the floor the slot had when its current holder claimed it.
-- Apply after 0001. `SqlStrategy::ensure_table` (and `ensure_pool`) run the same statements
-- on a 0.1 table by themselves. Existing rows keep their leases and fences and get floor 0.
ALTER TABLE "leasehold_leases" ADD COLUMN floor_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "leasehold_leases" ADD COLUMN grant_floor_ms INTEGER NOT NULL DEFAULT 0;
