//! The server-side scripts. Each runs atomically on the server, so a scan, a
//! claim and a fence bump happen in one round trip with nothing in between.
//!
//! Slot numbers cross into Lua as decimal strings; fences come back as
//! integers, floors (Unix ms) as decimal strings.

/// A Lua script and its SHA1, sent with `EVALSHA` (falling back to `EVAL`
/// when the server lost its script cache).
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) body: &'static str,
    pub(crate) sha: String,
}

impl Script {
    fn new(name: &'static str, body: &'static str) -> Self {
        Self {
            name,
            body,
            sha: fred::util::sha1_hash(body),
        }
    }
}

/// Lua helpers for the slot's hand-over floor, kept in the fences hash as
/// `floor.<slot>` (Unix ms, no TTL). Floors cross into Lua as decimal strings
/// without leading zeros and are compared as such (longer is bigger, then
/// byte order), which is exact for every `u64`; Lua's numbers are doubles,
/// exact only below 2^53. `bad_floor(fences, slot)` answers a stored floor
/// that is not such a string (a sign, a leading zero, a letter, above
/// `u64::MAX`), or nil: claims and renewals refuse the slot then, before
/// they write anything, instead of reading it as 0 or raising it to their
/// ceiling (which can be below the slot's real floor), so that it stays
/// for an operator to repair.
macro_rules! floor_functions {
    () => {
        r"
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function raise_floor(fences, slot, ceiling)
  local field = 'floor.' .. slot
  local old = redis.call('HGET', fences, field) or '0'
  if above(ceiling, old) then redis.call('HSET', fences, field, ceiling) end
  return old
end
local function bad_floor(fences, slot)
  local v = redis.call('HGET', fences, 'floor.' .. slot)
  if not v or v == '0' then return nil end
  if string.match(v, '^[1-9]%d*$') and not above(v, '18446744073709551615') then return nil end
  return v
end
"
    };
}

/// Lua helper for the server's clock: `now()` answers its `TIME` (seconds,
/// microseconds), returned with grants and renewals for the lease manager's
/// store-clock check (DESIGN.md, rule 11), and the seed of a claim's fence.
/// A claim writes after it, which needs scripts replicated by their effects:
/// the default from Redis 5 on, the only way from Redis 7 and Valkey.
macro_rules! clock_function {
    () => {
        r"
local function now()
  local t = redis.call('TIME')
  return t[1], t[2]
end
"
    };
}

/// Lua helper for the holder record: `note_holder(fences, slot,
/// token, ttl, holder, secs, micros)` writes `holder.<slot>` in the fences
/// hash as `<first 8 hex digits of the token> <secs> <micros> <ttl ms>
/// <holder>`: who claimed the slot, when on the server's clock, and for how
/// long. For `inspect` only: nothing compares it, ownership is still the
/// token's alone; `inspect` shows the holder only while the 8 digits match
/// the live token, so a record left by an earlier holder (or a lease taken
/// by a process that writes none) shows no name. It follows `TIME`, and a
/// write after `TIME` is refused by a server still replicating scripts
/// verbatim (Redis 5/6 with `lua-replicate-commands no`), so it is a
/// `pcall`: there the claim goes on without the record.
macro_rules! holder_function {
    () => {
        r"
local function note_holder(fences, slot, token, ttl, holder, secs, micros)
  redis.pcall('HSET', fences, 'holder.' .. slot,
    string.sub(token, 1, 8) .. ' ' .. secs .. ' ' .. micros .. ' ' .. ttl .. ' ' .. holder)
end
"
    };
}

/// Lua helpers for a lost fences hash.
///
/// - `fences_lost(fences, leases, prefix, size)` (claims): true when the
///   fences hash carries the sticky field `lost`, or when it is gone while
///   the pool's leases hash or any of its slot keys exists (a claim creates
///   the fences hash in the same script as the lease, so a lease without it
///   means the hash was evicted, deleted or not replicated before a
///   failover). Then it writes `lost`, so that the refusal outlives the
///   evidence: without it, once those leases expired, fences would restart
///   at 1 and floors at 0 below what earlier holders used. The slot-key scan
///   runs only while the fences hash is absent (a pool's first claim).
/// - `mark_if_lost(fences)` (renewals and releases whose token matched, so a
///   lease exists): writes `lost` when the fences hash is gone, before the
///   floor is written (which would create the hash).
macro_rules! fences_functions {
    () => {
        r"
local function fences_lost(fences, leases, prefix, size)
  if redis.call('HEXISTS', fences, 'lost') == 1 then return true end
  if redis.call('EXISTS', fences) == 1 then return false end
  local gone = redis.call('EXISTS', leases) == 1
  local s = 0
  while not gone and s < size do
    gone = redis.call('EXISTS', prefix .. s) == 1
    s = s + 1
  end
  if gone then redis.call('HSET', fences, 'lost', '1') end
  return gone
end
local function mark_if_lost(fences)
  if redis.call('EXISTS', fences) == 0 then redis.call('HSET', fences, 'lost', '1') end
end
"
    };
}

/// `damaged_pool(fences)`: the first of the pool's records a claim relies
/// on whose value is not whole milliseconds, as `field, value`, or nil:
/// `span` (the restart guard's wait, `guard_functions`), `replid_seen`
/// (the promotion guard's, `promotion_functions`) and `gone_seen` (the
/// wipe guard's, `wipe_functions`). `tonumber` would read any of them as
/// 0: no wait. (`span_fsynced` read as 0 only makes a claim wait for the
/// disk, and `next` is a hint.)
macro_rules! damaged_functions {
    () => {
        r"
local function damaged_pool(fences)
  for _, field in ipairs({'span', 'replid_seen', 'gone_seen'}) do
    local v = redis.call('HGET', fences, field)
    if v and not string.match(v, '^%d+$') then return field, v end
  end
  return nil
end
"
    };
}

/// The restart guard and the pool's restart span.
///
/// - `restarted(fences, guard_on, own_span)` answers the ms until grants may
///   resume, or 0. A server that can forget what it acknowledged may come
///   back without a lease a holder still relies on, and without the floor
///   that holder raised; no claim succeeds until the server has been up
///   (`uptime_in_seconds` from `INFO server`, which scripts may call) for
///   the pool's restart span: the largest of the span recorded in the
///   fences hash (`span`, ms) and this claimer's own (`own_span`, its TTL
///   plus twice its `max_clock_skew`). By then every lease of the previous
///   run has passed its holder's deadline, whatever TTL that holder used.
///   `guard_on` other than `'1'`: no guard (`DurabilityPolicy::Throwaway`).
/// - `raise_span(fences, own_span)` (claims that granted): raises the
///   recorded `span` to `own_span`; answers 1 when `own_span` is above the
///   span known to be on disk (`span_fsynced`, raised after a `WAITAOF` by
///   `RAISE_FSYNCED_SPAN`): on a server that fsyncs on request, the claim
///   must then wait until its writes are on disk before it is used.
macro_rules! guard_functions {
    () => {
        r"
local function recorded_span(fences)
  return tonumber(redis.call('HGET', fences, 'span') or '0') or 0
end
local function restarted(fences, guard_on, own_span)
  if guard_on ~= '1' then return 0 end
  local span = recorded_span(fences)
  if own_span > span then span = own_span end
  local info = redis.call('INFO', 'server')
  local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)') or '0') or 0
  -- The uptime is a difference of whole seconds of the clock: it can read
  -- up to a second more than has passed. Count one second less.
  local passed = (up - 1) * 1000
  if passed >= span then return 0 end
  if passed < 0 then passed = 0 end
  return span - passed
end
local function raise_span(fences, own_span)
  if own_span > recorded_span(fences) then
    redis.call('HSET', fences, 'span', string.format('%.0f', own_span))
  end
  local fsynced = tonumber(redis.call('HGET', fences, 'span_fsynced') or '0') or 0
  if own_span > fsynced then return 1 end
  return 0
end
"
    };
}

/// The promotion guard: a failover to an asynchronous replica.
///
/// `promoted(fences, on, span)` answers the ms until grants may resume, or
/// 0. A replica promoted to primary may lack claims, renewals and fences the
/// old primary acknowledged, and its `uptime_in_seconds` is its own, so the
/// restart guard does not see the change. What does change is the
/// replication ID (`master_replid` in `INFO replication`, which scripts may
/// call): measured on Valkey 8.1, a promotion (`SENTINEL FAILOVER`, or the
/// primary killed) gives the promoted server a new `master_replid` and moves
/// the old primary's into `master_replid2`; a restart of a primary gives it
/// a new `master_replid` too, with `master_replid2` all zeros (with and
/// without the append-only file).
///
/// The fences hash records the ID the pool last saw (`replid`) and when a
/// claim first saw it (`replid_seen`, the server's `TIME` in ms; `0`: no
/// wait). A claim that finds another ID records the new one and, when the
/// change may be a failover, with now: then no claim is granted until the
/// pool's restart span (`span`: the recorded span or the claimer's own,
/// whichever is longer) has passed since. By then every lease the new
/// primary does not know has passed its holder's deadline (that holder's
/// renewals answer `Lost` here: its token is not found). A change counts as
/// a possible failover when the server took over from another primary since
/// it started (`master_replid2` not all zeros), or, for a pool that recorded
/// an ID before, when the server has replicas or the pool ever saw one
/// (`replicated`, set by any claim that finds `connected_slaves` above 0):
/// a restarted promoted server has lost its `master_replid2`. A durable
/// server that never had replicas changes its ID on every restart, and
/// loses nothing then: it is not held back (a restart of one that can
/// forget is the restart guard's). `on` other than `'1'`: no guard.
macro_rules! promotion_functions {
    () => {
        r"
local function promoted(fences, on, span)
  if on ~= '1' then return 0 end
  local info = redis.call('INFO', 'replication')
  local id = string.match(info, 'master_replid:(%x+)')
  if not id then return 0 end
  local id2 = string.match(info, 'master_replid2:(%x+)') or ''
  local replicas = tonumber(string.match(info, 'connected_slaves:(%d+)') or '0') or 0
  if replicas > 0 and redis.call('HGET', fences, 'replicated') ~= '1' then
    redis.call('HSET', fences, 'replicated', '1')
  end
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local recorded = redis.call('HGET', fences, 'replid')
  local seen = 0
  if recorded == id then
    seen = tonumber(redis.call('HGET', fences, 'replid_seen') or '0') or 0
  else
    local took_over = string.find(id2, '[^0]') ~= nil
    local had_replicas = redis.call('HGET', fences, 'replicated') == '1'
    if took_over or (recorded and had_replicas) then seen = now_ms end
    redis.call('HSET', fences, 'replid', id, 'replid_seen', string.format('%.0f', seen))
  end
  if seen == 0 then return 0 end
  local passed = now_ms - seen
  if passed >= span then return 0 end
  if passed < 0 then passed = 0 end
  return span - passed
end
"
    };
}

/// The wipe guard: the pool's records found gone.
///
/// `wiped(fences, on, own_span, raise)` answers the ms until grants may
/// resume, or 0. A `FLUSHALL`, a `FLUSHDB`, or a deletion of the pool's keys while
/// holders run leaves nothing that says the pool ever existed: the next
/// claim would find every slot free and grant one a holder still uses
/// until its next renewal. So a pool without its fences hash (which claims
/// create and nothing but an operator or a data loss removes) counts as
/// possibly wiped: the first claim (or `prepare`) that finds it gone
/// records when, as the server's `TIME` in ms (`gone_seen`), and no claim
/// is granted until the pool's restart span has passed since then. The
/// span recorded by earlier holders went with the wipe, so it is the
/// longest of the waiting claimers' own (each claim, `raise` true, raises
/// `span` to its own; `prepare` does not, since an operator's tool may not
/// know the pool's TTL): the assumption `DurabilityPolicy::OneTimingPerPool`
/// states. By then every lease granted before the wipe has passed its
/// holder's deadline (their renewals answer `Lost`: the token is gone).
///
/// `gone_seen` `0` means no wait: a pool an operator declared new
/// (`DECLARE_NEW_POOL`), or a fences hash made by a leasehold that did not
/// record it (its records are there). A genuinely new pool waits one span
/// on its first claim unless declared new. `on` other than `'1'`: no guard
/// (`DurabilityPolicy::Throwaway`), and nothing is written.
macro_rules! wipe_functions {
    () => {
        r"
local function wiped(fences, on, own_span, raise)
  if on ~= '1' then return 0 end
  local seen = redis.call('HGET', fences, 'gone_seen')
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not seen then
    if redis.call('EXISTS', fences) == 1 then
      redis.call('HSET', fences, 'gone_seen', '0')
      return 0
    end
    seen = string.format('%.0f', now_ms)
    redis.call('HSET', fences, 'gone_seen', seen)
  end
  seen = tonumber(seen)
  if seen == 0 then return 0 end
  local passed = now_ms - seen
  if passed < 0 then passed = 0 end
  local recorded = tonumber(redis.call('HGET', fences, 'span') or '0') or 0
  if own_span > recorded then
    if raise then redis.call('HSET', fences, 'span', string.format('%.0f', own_span)) end
    recorded = own_span
  end
  if passed >= recorded then return 0 end
  return recorded - passed
end
"
    };
}

/// The slot's next fence: `next_fence(fences, slot, secs, micros)` writes
/// and answers `max(previous + 1, the server's TIME in µs)`; claims check
/// `bad_fence(fences, slot)` (the stored fence when it is unusable, else
/// nil) before they write anything: the previous fence must be a number
/// below 2^53 - 1 (Lua's numbers are doubles, exact
/// only below 2^53; the server's clock in µs is about 1.8e15, so this
/// leaves two centuries). Seeding from the clock keeps fences
/// rising across a loss of the fences hash (a restart without persistence,
/// a flush, a failover): what the server forgot was issued before the loss,
/// so below its clock now, unless the server's clock went back. Written as
/// a decimal string, so `HGET` and `inspect` read it exactly.
macro_rules! fence_function {
    () => {
        r"
local function bad_fence(fences, slot)
  local old = redis.call('HGET', fences, slot)
  if not old then return nil end
  local prev = tonumber(old)
  if prev ~= nil and prev >= 0 and prev < 9007199254740991 then return nil end
  return old
end
local function next_fence(fences, slot, secs, micros)
  local fence = (tonumber(redis.call('HGET', fences, slot) or '0') or 0) + 1
  local now = tonumber(secs) * 1000000 + tonumber(micros)
  if now > fence then fence = now end
  redis.call('HSET', fences, slot, string.format('%.0f', fence))
  return fence
end
"
    };
}

/// The pool's ID format, kept in the fences hash as `id_format` (the
/// canonical text of `IdFormat`, 1 to 200 printable ASCII characters).
/// Two formats of one pool can mint equal values even on different slots,
/// so the first format a claim declares is kept for the pool's life.
///
/// - `other_format(fences, ours)` (claims, after the lost-hash check, before
///   anything is written): the recorded text when this claim declares a
///   format (`ours` not empty) and the pool recorded another, else nil.
///   A claim that declares none is not checked.
/// - `record_format(fences, ours)` (claims that granted): records `ours`
///   when the pool has no format yet; answers 1 when it wrote it. The record
///   must then be on disk before the grant is used, as a raised span must
///   (`guard_functions`): a crash of the machine that forgot it would let a
///   claim of another format through while values of this one were already
///   handed out.
macro_rules! format_functions {
    () => {
        r"
local function other_format(fences, ours)
  if ours == '' then return nil end
  local recorded = redis.call('HGET', fences, 'id_format')
  if recorded and recorded ~= ours then return recorded end
  return nil
end
local function record_format(fences, ours)
  if ours == '' then return 0 end
  return redis.call('HSETNX', fences, 'id_format', ours)
end
"
    };
}

/// HSETEX path, claim. KEYS: leases hash, fences hash. ARGV: size, ttl ms,
/// token hex, ceiling (Unix ms), slot key prefix (the script path's,
/// `{<prefix>:<pool>}:slot:`, same hash tag), this claimer's restart span
/// ms, holder identity (see `holder_function`), `1` when the restart guard
/// is on, the ID format the claimer declares (`''`: none), `1` when the
/// promotion guard is on (see `promotion_functions`). Returns `{slot,
/// fence, floor, secs, micros, unconfirmed}` (the floor the slot had before,
/// a decimal string; the server's `TIME`; 1 when this claimer's span is
/// above the span known to be on disk, see `guard_functions`, or when this
/// claim recorded the pool's ID format, see `format_functions`), -1 when
/// every slot is held, -2 when the fences hash was lost (see
/// `fences_functions`), `{-3, ms, why}` while the wipe, the restart or the
/// promotion guard holds (`why`: `wiped`, `restart`, `promotion`; see
/// `wipe_functions`, `guard_functions`, `promotion_functions`), `{-4, slot, fence}` when that slot's fence is not a number
/// below 2^53 - 1 (see `fence_function`; nothing is written then), `{-5,
/// recorded}` when the pool recorded another ID format than the one declared
/// (nothing is written then), or `{-6, slot, field, value}` when a record
/// the claim relies on is damaged (`slot` -1 for a record of the pool: see
/// `damaged_functions`; else the slot's floor: see `floor_functions`;
/// nothing is written then).
///
/// - The pool's records, then the lost fences hash, then the wipe and the
///   restart guard (the longer wait is answered), then the promotion
///   guard, then the ID format are checked before anything else: a lost
///   hash lost the recorded format too, another format is refused even when
///   the pool is full, and the wipe and promotion guards write to the
///   fences hash (so they come after the check that reads the hash's
///   absence). The wipe guard records a pool found gone even while the
///   restart guard holds, so that after a restart that lost the pool the
///   two waits run together.
/// - When the hash holds two fields per slot (`HLEN >= 2 * size`) every slot
///   is held: answer at once, without a scan. (Fields whose TTL ran out but
///   that the server has not yet reclaimed still count; the server's active
///   expiry removes them within a fraction of a second, and the answer is
///   retryable.)
/// - Otherwise scan for an absent slot field (expired fields are absent: the
///   server checks their TTL on access) whose script-path slot key is absent
///   too (a process still on the script path may hold the slot, after an
///   in-place upgrade from Redis 7 to 8), starting at the hint `next` in the
///   fences hash, wrapping around. Claims move the hint past the slot they
///   take and releases move it down to the slot they free, so without
///   expiries the scan starts at the lowest free slot and takes one step;
///   slots freed by expiry below the hint are found after the wrap.
/// - Claim with `HSETEX FNX` (both fields absent, one TTL), move the slot's
///   persistent fence to `max(fence + 1, TIME in µs)`, raise its persistent
///   floor to the ceiling, raise the pool's recorded restart span to this
///   claimer's, record the declared ID format if the pool has none yet, and
///   note the holder.
const CLAIM_HSETEX: &str = concat!(
    floor_functions!(),
    clock_function!(),
    holder_function!(),
    fences_functions!(),
    damaged_functions!(),
    guard_functions!(),
    promotion_functions!(),
    wipe_functions!(),
    fence_function!(),
    format_functions!(),
    r"
local size = tonumber(ARGV[1])
local span = tonumber(ARGV[6]) or 0
local field, value = damaged_pool(KEYS[2])
if field then return {-6, -1, field, value} end
if fences_lost(KEYS[2], KEYS[1], ARGV[5], size) then return -2 end
local gone = wiped(KEYS[2], ARGV[10], span, true)
local wait = restarted(KEYS[2], ARGV[8], span)
if gone > 0 and gone >= wait then return {-3, gone, 'wiped'} end
if wait > 0 then return {-3, wait, 'restart'} end
wait = promoted(KEYS[2], ARGV[10], math.max(span, recorded_span(KEYS[2])))
if wait > 0 then return {-3, wait, 'promotion'} end
local recorded = other_format(KEYS[2], ARGV[9] or '')
if recorded then return {-5, recorded} end
if redis.call('HLEN', KEYS[1]) >= 2 * size then return -1 end
local start = tonumber(redis.call('HGET', KEYS[2], 'next') or '0') or 0
if start >= size then start = 0 end
for i = 0, size - 1 do
  local s = (start + i) % size
  local f = tostring(s)
  if redis.call('HEXISTS', KEYS[1], f) == 0 and redis.call('EXISTS', ARGV[5] .. f) == 0 then
    local bad = bad_fence(KEYS[2], f)
    if bad then return {-4, s, bad} end
    bad = bad_floor(KEYS[2], f)
    if bad then return {-6, s, 'floor.' .. f, bad} end
    local ok = redis.call('HSETEX', KEYS[1], 'FNX', 'PX', ARGV[2], 'FIELDS', 2,
      f, ARGV[3], 'token.' .. f .. '.' .. ARGV[3], f)
    if ok == 1 then
      local secs, micros = now()
      redis.call('HSET', KEYS[2], 'next', tostring(s + 1))
      local fence = next_fence(KEYS[2], f, secs, micros)
      local floor = raise_floor(KEYS[2], f, ARGV[4])
      local unconfirmed = raise_span(KEYS[2], span)
      if record_format(KEYS[2], ARGV[9] or '') == 1 then unconfirmed = 1 end
      note_holder(KEYS[2], f, ARGV[3], ARGV[2], ARGV[7] or '', secs, micros)
      return {s, fence, floor, secs, micros, unconfirmed}
    end
  end
end
return -1
"
);

/// HSETEX path, renew. KEYS: leases hash, fences hash. ARGV: slot, token hex,
/// ttl ms, ceiling (Unix ms). Extends both fields with one
/// `HSETEX FXX PX` (which writes only if *both* exist) when the slot field
/// still holds our token, and then raises the slot's floor to the ceiling
/// (marking the fences hash lost first if it is gone); otherwise changes
/// nothing. Returns `{1, secs, micros}` (the server's `TIME`) when renewed,
/// 0 when not held, `{-6, floor}` when the slot's floor is damaged (see
/// `floor_functions`; nothing is written then).
const RENEW_HSETEX: &str = concat!(
    floor_functions!(),
    clock_function!(),
    fences_functions!(),
    r"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local bad = bad_floor(KEYS[2], ARGV[1])
if bad then return {-6, bad} end
local ok = redis.call('HSETEX', KEYS[1], 'FXX', 'PX', ARGV[3], 'FIELDS', 2,
  ARGV[1], ARGV[2], 'token.' .. ARGV[1] .. '.' .. ARGV[2], ARGV[1])
if ok ~= 1 then return 0 end
mark_if_lost(KEYS[2])
raise_floor(KEYS[2], ARGV[1], ARGV[4])
local secs, micros = now()
return {1, secs, micros}
"
);

/// Moves the claim hint down to a freed slot. KEYS[2]: fences hash, ARGV[1]: slot.
macro_rules! lower_hint {
    () => {
        "
local hint = tonumber(redis.call('HGET', KEYS[2], 'next') or '0') or 0
if tonumber(ARGV[1]) < hint then redis.call('HSET', KEYS[2], 'next', ARGV[1]) end
"
    };
}

/// HSETEX path, release. KEYS: leases hash, fences hash. ARGV: slot, token
/// hex, issued (Unix ms). Deletes the slot field and the marker only when the
/// slot field still holds our token (and lowers the claim hint, and sets the
/// slot's floor to what the holder issued, marking the fences hash lost
/// first if it is gone); otherwise deletes nothing but our own marker (a
/// name no other holder can have) and leaves the floor.
/// Returns 1 when released, 0 when not held.
const RELEASE_HSETEX: &str = concat!(
    fences_functions!(),
    r"
local marker = 'token.' .. ARGV[1] .. '.' .. ARGV[2]
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  mark_if_lost(KEYS[2])
  redis.call('HDEL', KEYS[1], ARGV[1], marker)
  redis.call('HSET', KEYS[2], 'floor.' .. ARGV[1], ARGV[3])",
    lower_hint!(),
    r"
  return 1
end
redis.call('HDEL', KEYS[1], marker)
return 0
"
);

/// Revoke (administrative), either path. KEYS: leases hash, slot key. ARGV:
/// slot. Ends the lease without freeing the slot: the slot field (or slot
/// key) is overwritten with the tombstone `revoked`, keeping its TTL, so the
/// slot stays taken until the revoked lease would have expired (its holder
/// may generate until its next renewal); the HSETEX marker is deleted. The
/// holder's renewal then finds its token gone (`Lost`) and its release
/// frees nothing (`NotHeld`); the floor and fence are left as they are.
/// Tokens are hex, so no holder's token is ever equal to the tombstone.
/// Both representations are revoked, so a lease taken on the other path (a
/// process not yet upgraded) is revoked too. Returns 1 when a live lease was
/// there.
const REVOKE: &str = r"
local n = 0
local tok = redis.call('HGET', KEYS[1], ARGV[1])
if tok and tok ~= 'revoked' then
  redis.call('HSETEX', KEYS[1], 'FXX', 'KEEPTTL', 'FIELDS', 1, ARGV[1], 'revoked')
  redis.call('HDEL', KEYS[1], 'token.' .. ARGV[1] .. '.' .. tok)
  n = 1
end
local v = redis.call('GET', KEYS[2])
if v and v ~= 'revoked' then
  redis.call('SET', KEYS[2], 'revoked', 'XX', 'KEEPTTL')
  n = 1
end
return n
";

/// Script path, claim. KEYS: fences hash, leases hash (the HSETEX path's).
/// ARGV: size, ttl ms, token hex, slot key prefix (`{<prefix>:<pool>}:slot:`,
/// the fences hash's hash tag), ceiling (Unix ms), this claimer's restart
/// span ms, holder identity (see `holder_function`), `1` when the restart
/// guard is on, the ID format the claimer declares (`''`: none), `1` when
/// the promotion guard is on. Checks the guards, the lost fences hash and the
/// ID format first, as the HSETEX claim does; then `SET NX PX` on slot keys from the hint `next` on, wrapping,
/// skipping slots whose field exists in the leases hash (held by a process
/// on the HSETEX path, after an in-place upgrade), until one succeeds; then
/// moves the hint, moves the fence to `max(fence + 1, TIME in µs)`, raises
/// the floor to the ceiling and the pool's recorded restart span to this
/// claimer's, records the declared ID format if the pool has none yet, and
/// notes the holder. Answers as the HSETEX claim does. (No
/// cheap count of live slot keys exists here, so a full pool costs a full
/// scan.)
const CLAIM_SCRIPTS: &str = concat!(
    floor_functions!(),
    clock_function!(),
    holder_function!(),
    fences_functions!(),
    damaged_functions!(),
    guard_functions!(),
    promotion_functions!(),
    wipe_functions!(),
    fence_function!(),
    format_functions!(),
    r"
local size = tonumber(ARGV[1])
local span = tonumber(ARGV[6]) or 0
local field, value = damaged_pool(KEYS[1])
if field then return {-6, -1, field, value} end
if fences_lost(KEYS[1], KEYS[2], ARGV[4], size) then return -2 end
local gone = wiped(KEYS[1], ARGV[10], span, true)
local wait = restarted(KEYS[1], ARGV[8], span)
if gone > 0 and gone >= wait then return {-3, gone, 'wiped'} end
if wait > 0 then return {-3, wait, 'restart'} end
wait = promoted(KEYS[1], ARGV[10], math.max(span, recorded_span(KEYS[1])))
if wait > 0 then return {-3, wait, 'promotion'} end
local recorded = other_format(KEYS[1], ARGV[9] or '')
if recorded then return {-5, recorded} end
local start = tonumber(redis.call('HGET', KEYS[1], 'next') or '0') or 0
if start >= size then start = 0 end
for i = 0, size - 1 do
  local s = (start + i) % size
  local f = tostring(s)
  if redis.call('HEXISTS', KEYS[2], f) == 0 and redis.call('EXISTS', ARGV[4] .. f) == 0 then
    local bad = bad_fence(KEYS[1], f)
    if bad then return {-4, s, bad} end
    bad = bad_floor(KEYS[1], f)
    if bad then return {-6, s, 'floor.' .. f, bad} end
    if redis.call('SET', ARGV[4] .. f, ARGV[3], 'NX', 'PX', ARGV[2]) then
      local secs, micros = now()
      redis.call('HSET', KEYS[1], 'next', tostring(s + 1))
      local fence = next_fence(KEYS[1], f, secs, micros)
      local floor = raise_floor(KEYS[1], f, ARGV[5])
      local unconfirmed = raise_span(KEYS[1], span)
      if record_format(KEYS[1], ARGV[9] or '') == 1 then unconfirmed = 1 end
      note_holder(KEYS[1], f, ARGV[3], ARGV[2], ARGV[7] or '', secs, micros)
      return {s, fence, floor, secs, micros, unconfirmed}
    end
  end
end
return -1
"
);

/// Script path, compare-and-extend. KEYS: slot key, fences hash. ARGV: token
/// hex, ttl ms, slot, ceiling (Unix ms). Raises the slot's floor to the
/// ceiling when it extends (marking the fences hash lost first if it is
/// gone) and returns `{1, secs, micros}` (the server's `TIME`); changes
/// nothing and returns 0 otherwise, or `{-6, floor}` when it holds the slot
/// but the slot's floor is damaged (see `floor_functions`).
const RENEW_SCRIPTS: &str = concat!(
    floor_functions!(),
    clock_function!(),
    fences_functions!(),
    r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local bad = bad_floor(KEYS[2], ARGV[3])
  if bad then return {-6, bad} end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  mark_if_lost(KEYS[2])
  raise_floor(KEYS[2], ARGV[3], ARGV[4])
  local secs, micros = now()
  return {1, secs, micros}
end
return 0
"
);

/// Script path, compare-and-delete. KEYS: slot key, fences hash. ARGV:
/// slot, token hex, issued (Unix ms). When it frees the slot it lowers the
/// claim hint and sets the slot's floor to what the holder issued (marking
/// the fences hash lost first if it is gone); otherwise it changes nothing.
const RELEASE_SCRIPTS: &str = concat!(
    fences_functions!(),
    r"
if redis.call('GET', KEYS[1]) == ARGV[2] then
  mark_if_lost(KEYS[2])
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'floor.' .. ARGV[1], ARGV[3])",
    lower_hint!(),
    r"
  return 1
end
return 0
"
);

/// Inspect (read-only), either path. KEYS: leases hash, fences hash. ARGV:
/// size, slot key prefix, `1` when the server has `HPTTL` (the HSETEX path's
/// per-field TTLs: Redis 8+, Valkey 9+). Returns `{secs, micros, entries…}`
/// (the server's `TIME`), one entry per slot that has a fence or a lease:
/// `{slot, fence, floor, token, pttl, holder}` where `token` is the first 8
/// hex digits of the live token (or `revoked`, or `''` when free), `pttl`
/// its TTL in ms (-1 unknown, -2 none) and `holder` the slot's holder record
/// (`holder_function`; `''` if none). Only 8 digits of a token ever leave
/// the server. A slot field (HSETEX path) is read before the slot key
/// (script path), as the claims skip either.
const INSPECT: &str = r"
local size = tonumber(ARGV[1])
local t = redis.call('TIME')
local out = {t[1], t[2]}
for s = 0, size - 1 do
  local f = tostring(s)
  local fence = redis.call('HGET', KEYS[2], f)
  local ttl = -2
  local tok = redis.call('HGET', KEYS[1], f)
  if tok then
    ttl = -1
    if ARGV[3] == '1' then ttl = redis.call('HPTTL', KEYS[1], 'FIELDS', 1, f)[1] end
  else
    tok = redis.call('GET', ARGV[2] .. f)
    if tok then ttl = redis.call('PTTL', ARGV[2] .. f) end
  end
  if fence or tok then
    out[#out + 1] = {s, fence or '0', redis.call('HGET', KEYS[2], 'floor.' .. f) or '0',
      tok and string.sub(tok, 1, 8) or '', ttl,
      redis.call('HGET', KEYS[2], 'holder.' .. f) or ''}
  end
end
return out
";

/// Sent with `WAITAOF` or `WAIT`, in one pipeline on one connection, before
/// a claim or renewal that must be on disk or on replicas is used. KEYS:
/// fences hash, leases hash (HSETEX path), slot key (script path). ARGV:
/// slot, token hex. When the token still holds the slot (in either
/// representation) it writes (`HINCRBY` of `wait_marks` in the fences hash)
/// and answers 1; otherwise it writes nothing and answers 0.
///
/// `WAITAOF` and `WAIT` answer for the writes of the connection they are
/// sent on: one sent on a connection that wrote nothing (the claim's or
/// renewal's connection dropped and fred reconnected) answers at once and
/// proves nothing. The mark is this connection's own write, made after the
/// claim or renewal, while the data it sees holds the lease: once the mark
/// is fsynced, or on the replicas (the append-only file and the replication
/// stream keep writes in order), what the claim or renewal wrote, and the
/// pool's span and ID format a claim relies on, are too, whatever
/// connection made it.
const MARK_LEASE: &str = r"
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'wait_marks', 1)
return 1
";

/// After a `WAITAOF` confirmed a claim's writes on disk, including the
/// pool's recorded span (at least the claimer's): raises `span_fsynced` to
/// the claimer's span. KEYS: fences hash. ARGV: span ms. The append-only
/// file keeps writes in order, so a `span_fsynced` that survives a crash
/// comes with a `span` at least as large; one that is lost only makes
/// later claims wait for the disk again. A fences hash that is gone (wiped
/// since the claim) is not made again: a hash holding only this field
/// would look like a pool's records to the wipe guard (`wipe_functions`).
const RAISE_FSYNCED_SPAN: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local old = tonumber(redis.call('HGET', KEYS[1], 'span_fsynced') or '0') or 0
if tonumber(ARGV[1]) > old then redis.call('HSET', KEYS[1], 'span_fsynced', ARGV[1]) end
return 1
";

/// `prepare` of a pool (an operator's call, which applications make on
/// every start). KEYS: fences hash, leases hash. ARGV: slot key prefix,
/// size, the caller's restart span ms, `1` when the guards are on. Makes
/// the pool's incarnation record as a claim would: a pool whose fences hash
/// is gone counts as possibly wiped from now on (`wipe_functions`), so a
/// `prepare` never hides a wipe, it only starts the wait earlier; it leaves
/// the recorded span as it is. Answers
/// `{ms}` (the ms until grants may resume, 0: none), -2 when the fences
/// hash was lost while leases remained (`fences_functions`), or `{-6, -1,
/// field, value}` for a damaged record of the pool (`damaged_functions`).
const PREPARE_POOL: &str = concat!(
    fences_functions!(),
    damaged_functions!(),
    wipe_functions!(),
    r"
local field, value = damaged_pool(KEYS[1])
if field then return {-6, -1, field, value} end
if fences_lost(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])) then return -2 end
return {wiped(KEYS[1], ARGV[4], tonumber(ARGV[3]) or 0, false)}
"
);

/// An operator's statement that a pool is new, or that every holder of
/// it has stopped: its records are made, or its wipe guard's wait is ended
/// (`gone_seen` `0`, see `wipe_functions`). KEYS: fences hash, leases hash.
/// ARGV: slot key prefix, size. Refuses, writing nothing, when a slot has
/// a live lease or a tombstone (HSETEX field or slot key): `{-1, slot}`;
/// or when the fences hash is marked lost: -2 (that repair is its own).
/// Answers 1.
const DECLARE_NEW_POOL: &str = r"
if redis.call('HEXISTS', KEYS[1], 'lost') == 1 then return -2 end
for s = 0, tonumber(ARGV[2]) - 1 do
  if redis.call('HEXISTS', KEYS[2], tostring(s)) == 1 or redis.call('EXISTS', ARGV[1] .. s) == 1 then
    return {-1, s}
  end
end
redis.call('HSET', KEYS[1], 'gone_seen', '0')
return 1
";

/// What the guards of a pool hold back, read without writing (`leasehold
/// doctor`): KEYS[1] the fences hash. Answers `{exists, span, gone_seen,
/// replid, replid_seen, lost, now_ms, master_replid, uptime_in_seconds}`,
/// `''` for what is absent: the fields the claim scripts' guards read
/// (`guard_functions`, `promotion_functions`, `wipe_functions`) and what
/// the server says now, on the node that holds the pool.
const GUARDS: &str = r"
local function get(field) return redis.call('HGET', KEYS[1], field) or '' end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
local up = string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)') or ''
return {redis.call('EXISTS', KEYS[1]), get('span'), get('gone_seen'), get('replid'),
  get('replid_seen'), get('lost'), string.format('%.0f', now_ms), id, up}
";

/// All scripts, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim_hsetex: Script,
    pub(crate) renew_hsetex: Script,
    pub(crate) release_hsetex: Script,
    pub(crate) revoke: Script,
    pub(crate) claim_scripts: Script,
    pub(crate) renew_scripts: Script,
    pub(crate) release_scripts: Script,
    pub(crate) inspect: Script,
    pub(crate) raise_fsynced_span: Script,
    pub(crate) prepare_pool: Script,
    pub(crate) declare_new_pool: Script,
    /// Doctor's reading of a pool's guards; not loaded at connect.
    pub(crate) guards: Script,
    /// Sent with `EVAL` only (in a pipeline with `WAITAOF` or `WAIT`),
    /// never loaded.
    pub(crate) mark_lease: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            claim_hsetex: Script::new("claim (HSETEX)", CLAIM_HSETEX),
            renew_hsetex: Script::new("renew (HSETEX)", RENEW_HSETEX),
            release_hsetex: Script::new("release (HSETEX)", RELEASE_HSETEX),
            revoke: Script::new("revoke (tombstone)", REVOKE),
            claim_scripts: Script::new("claim (SET NX)", CLAIM_SCRIPTS),
            renew_scripts: Script::new("renew (compare-and-extend)", RENEW_SCRIPTS),
            release_scripts: Script::new("release (compare-and-delete)", RELEASE_SCRIPTS),
            inspect: Script::new("inspect", INSPECT),
            raise_fsynced_span: Script::new("raise the fsynced span", RAISE_FSYNCED_SPAN),
            prepare_pool: Script::new("prepare the pool", PREPARE_POOL),
            declare_new_pool: Script::new("declare the pool new", DECLARE_NEW_POOL),
            guards: Script::new("read the pool's guards", GUARDS),
            mark_lease: Script::new("mark the lease before a wait", MARK_LEASE),
        }
    }

    /// The scripts a path uses (loaded at connect).
    pub(crate) fn for_path(&self, hsetex: bool) -> Vec<&Script> {
        if hsetex {
            vec![
                &self.claim_hsetex,
                &self.renew_hsetex,
                &self.release_hsetex,
                &self.revoke,
                &self.raise_fsynced_span,
            ]
        } else {
            vec![
                &self.claim_scripts,
                &self.renew_scripts,
                &self.release_scripts,
                &self.revoke,
                &self.raise_fsynced_span,
            ]
        }
    }
}
