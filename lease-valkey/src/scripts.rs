//! The server-side scripts. Each runs atomically on the server, so a scan, a
//! claim and a fence bump happen in one round trip with nothing in between.
//!
//! Slot numbers cross into Lua as decimal strings; fences come back as
//! integers.

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

/// HSETEX path, claim. KEYS: leases hash, fences hash. ARGV: size, ttl ms,
/// token hex. Finds the lowest slot whose field is absent (expired fields
/// are absent: the server checks their TTL on access), writes the slot field
/// and the ownership marker with `FNX` and one TTL, bumps the slot's
/// persistent fence. Returns `{slot, fence}`, or -1 when every slot is held.
///
/// The scan stops at the first free slot, so it costs O(held + 1) `HEXISTS`
/// calls, never more than O(size).
const CLAIM_HSETEX: &str = r"
local size = tonumber(ARGV[1])
for s = 0, size - 1 do
  local f = tostring(s)
  if redis.call('HEXISTS', KEYS[1], f) == 0 then
    local ok = redis.call('HSETEX', KEYS[1], 'FNX', 'PX', ARGV[2], 'FIELDS', 2,
      f, ARGV[3], 'token.' .. f .. '.' .. ARGV[3], f)
    if ok == 1 then
      return {s, redis.call('HINCRBY', KEYS[2], f, 1)}
    end
  end
end
return -1
";

/// HSETEX path, release. KEYS: leases hash. ARGV: slot, token hex. Deletes
/// the slot field and the marker only when the slot field still holds our
/// token; otherwise deletes nothing but our own marker (a name no other
/// holder can have). Returns 1 when released, 0 when not held.
const RELEASE_HSETEX: &str = r"
local marker = 'token.' .. ARGV[1] .. '.' .. ARGV[2]
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1], marker)
  return 1
end
redis.call('HDEL', KEYS[1], marker)
return 0
";

/// HSETEX path, revoke (administrative). KEYS: leases hash. ARGV: slot.
/// Deletes the slot field and its holder's marker together. Returns 1 when a
/// lease was there.
const REVOKE_HSETEX: &str = r"
local tok = redis.call('HGET', KEYS[1], ARGV[1])
if not tok then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1], 'token.' .. ARGV[1] .. '.' .. tok)
return 1
";

/// Script path, claim. KEYS: fences hash. ARGV: size, ttl ms, token hex, slot
/// key prefix (`<prefix>:{<pool>}:slot:`, same hash tag as the fences hash).
/// `SET NX PX` on each slot key from 0 until one succeeds, then bumps the
/// fence. Returns `{slot, fence}`, or -1.
const CLAIM_SCRIPTS: &str = r"
local size = tonumber(ARGV[1])
for s = 0, size - 1 do
  if redis.call('SET', ARGV[4] .. s, ARGV[3], 'NX', 'PX', ARGV[2]) then
    return {s, redis.call('HINCRBY', KEYS[1], tostring(s), 1)}
  end
end
return -1
";

/// Script path, compare-and-extend. KEYS: slot key. ARGV: token hex, ttl ms.
const RENEW_SCRIPTS: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Script path, compare-and-delete. KEYS: slot key. ARGV: token hex.
const RELEASE_SCRIPTS: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// All scripts, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim_hsetex: Script,
    pub(crate) release_hsetex: Script,
    pub(crate) revoke_hsetex: Script,
    pub(crate) claim_scripts: Script,
    pub(crate) renew_scripts: Script,
    pub(crate) release_scripts: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            claim_hsetex: Script::new("claim (HSETEX)", CLAIM_HSETEX),
            release_hsetex: Script::new("release (HSETEX)", RELEASE_HSETEX),
            revoke_hsetex: Script::new("revoke (HSETEX)", REVOKE_HSETEX),
            claim_scripts: Script::new("claim (SET NX)", CLAIM_SCRIPTS),
            renew_scripts: Script::new("renew (compare-and-extend)", RENEW_SCRIPTS),
            release_scripts: Script::new("release (compare-and-delete)", RELEASE_SCRIPTS),
        }
    }

    /// The scripts a path uses (loaded at connect).
    pub(crate) fn for_path(&self, hsetex: bool) -> Vec<&Script> {
        if hsetex {
            vec![
                &self.claim_hsetex,
                &self.release_hsetex,
                &self.revoke_hsetex,
            ]
        } else {
            vec![
                &self.claim_scripts,
                &self.renew_scripts,
                &self.release_scripts,
            ]
        }
    }
}
