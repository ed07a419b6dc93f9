-- leasehold-sql 0.3 (sqlite): the issuer of every fence in the fence table (DESIGN.md, timing rule 7).
-- pool, slot: the pool and slot whose grant issued the fence of the resource's last write.
-- Fences count per slot, so a write from another pool or slot is refused whatever its fence.
-- Apply to a fence table created by an older leasehold-sql (`FenceTable::ensure` creates new
-- ones with these columns, and adds them to an old one by itself). Existing rows keep their
-- fences; each takes the pool and slot of its next fenced write (which must carry a fence no
-- smaller than the one recorded).
ALTER TABLE "leasehold_fences" ADD COLUMN pool TEXT;
ALTER TABLE "leasehold_fences" ADD COLUMN slot INTEGER;
