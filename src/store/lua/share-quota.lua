-- An account's share quota (SPEC §12): one field per live share ("s:<slug>" = its bytes) beside the
-- totals, so a release is idempotent per share (HDEL answers 1 once) and concurrent creates cannot pass
-- the quota (the check and the count are one script in the account's slot).
-- KEYS: 1 quota hash. ARGV: 1 'reserve' | 'release', 2 slug, 3 bytes, 4 max count, 5 max bytes.
-- reserve → 'ok' | 'count' | 'bytes'; release → 1 when the share was counted, else 0.
local field = 's:' .. ARGV[2]
if ARGV[1] == 'release' then
  local b = redis.call('HGET', KEYS[1], field)
  if not b then return 0 end
  redis.call('HDEL', KEYS[1], field)
  redis.call('HINCRBY', KEYS[1], 'count', -1)
  redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(b))
  return 1
end
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
local total = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
local bytes = tonumber(ARGV[3])
if count + 1 > tonumber(ARGV[4]) then return 'count' end
if total + bytes > tonumber(ARGV[5]) then return 'bytes' end
redis.call('HSET', KEYS[1], field, bytes)
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HINCRBY', KEYS[1], 'bytes', bytes)
return 'ok'
