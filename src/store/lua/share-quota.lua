-- An account's shares (SPEC §12 quotas, §13): one field per share beside the totals `count` and `bytes`.
-- A live share's field is `<created ms>:<bytes>` (base 36), a revoked one's `<created ms>:-`: the
-- console lists an account's shares from this hash, and a release is idempotent per share (only a live
-- field gives its bytes back). Shares of the layout before this one have a field `s:<slug>` = bytes
-- (released the old way: deleted). Concurrent creates cannot pass the quota: the check and the count
-- are one script in the account's slot.
-- KEYS: 1 quota hash, 2 the account's ledger stream (it exists once the account was granted credit).
-- ARGV: 1 'reserve' | 'release' | 'drop', 2 slug, 3 bytes, 4 max count, 5 max bytes,
--       6 max count while never funded, 7 the new field's value `<created ms>:<bytes>` (base 36).
-- reserve → 'ok' | 'count' | 'bytes' | 'unfunded'; release (revoked: keep it listed) and drop (never
-- stored: forget it) → 1 when the share was counted, else 0.
local legacy = 's:' .. ARGV[2]
if ARGV[1] ~= 'reserve' then
  local b = redis.call('HGET', KEYS[1], legacy)
  local field = legacy
  if not b then
    field = ARGV[2]
    local v = redis.call('HGET', KEYS[1], field)
    if not v then return 0 end
    local sep = string.find(v, ':', 1, true)
    local rest = string.sub(v, sep + 1)
    if rest == '-' then
      if ARGV[1] == 'drop' then redis.call('HDEL', KEYS[1], field) end
      return 0
    end
    b = tonumber(rest, 36)
    if ARGV[1] == 'drop' then redis.call('HDEL', KEYS[1], field)
    else redis.call('HSET', KEYS[1], field, string.sub(v, 1, sep) .. '-') end
  else
    redis.call('HDEL', KEYS[1], field)
  end
  redis.call('HINCRBY', KEYS[1], 'count', -1)
  redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(b))
  return 1
end
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
local total = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
local bytes = tonumber(ARGV[3])
if count + 1 > tonumber(ARGV[4]) then return 'count' end
if count + 1 > tonumber(ARGV[6]) and redis.call('EXISTS', KEYS[2]) == 0 then return 'unfunded' end
if total + bytes > tonumber(ARGV[5]) then return 'bytes' end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[7])
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HINCRBY', KEYS[1], 'bytes', bytes)
return 'ok'
