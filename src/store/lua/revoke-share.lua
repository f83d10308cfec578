-- Revoke a share: its record becomes a tombstone `a` (account), `c` (created_at), `r` (revoked_at) that
-- expires after the retention (docs/shares.md "Revoke"): reads answer 410 until then, 404 after. The
-- files list and sizes go at once, so a revoked share costs Redis a few dozen bytes, for a bounded time.
-- Records of both layouts: compact (`a`, `c`, `b`, `f`, `r`) and the one before it (`slug`, `snapshot`,
-- `revoked_at`, …) that the migration rewrites (share-compact.lua); either becomes a compact tombstone.
-- Idempotent: a tombstone is returned as it is (its expiry is not pushed back; its revoked_at is kept).
-- KEYS: 1 share hash. ARGV: 1 ts, 2 retention ms.
-- → false when the share does not exist, else the record's fields as they were, revoked_at set.
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return false end
local o = {}
for i = 1, #h, 2 do o[h[i]] = h[i + 1] end
if o['a'] and (o['r'] or '') ~= '' and not o['b'] and not o['f'] then return h end
local field = 'r'
local account, created = o['a'], o['c']
if not account then
  field = 'revoked_at'
  account, created = o['account'] or '', o['created_at'] or ''
end
if (o[field] or '') == '' then o[field] = ARGV[1] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', account, 'c', created or '', 'r', o[field])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local out = {}
for k, v in pairs(o) do
  out[#out + 1] = k
  out[#out + 1] = v
end
return out
