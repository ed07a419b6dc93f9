-- leasehold-sql 0.3 (postgres): the ID format of every pool (a process generating another one is refused).
-- id_format: the canonical text of the ID format the pool's holders generate, recorded by the
-- first claim that declares one on the pool's own row (slot 2147483647, beyond every slot) and
-- kept for the pool's life; a claim declaring another format is refused. NULL on slot rows.
-- Apply after 0003. `SqlStrategy::ensure_table` (and `ensure_pool`) run the same statement
-- by themselves. Existing rows keep their leases, fences and floors.
ALTER TABLE "leasehold_leases" ADD COLUMN id_format VARCHAR(200);
