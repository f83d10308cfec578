-- An account's shares (SPEC §12 quotas, §13): one field per live share beside the totals `count` and
-- `bytes`, `<created ms>:<bytes>` (base 36): the console lists an account's live shares from this hash.
-- A release deletes the field and gives its count and bytes back, so it is idempotent per share. A revoked
-- share is then remembered in the account's revoked set (score: revoke ms), at most `max revoked` of them
-- within the retention: the console lists them, and the caller deletes the tombstones of those pushed out
-- (docs/shares.md "Revoke"), so Redis per account stays bounded whatever the create/revoke churn. Shares
-- of the layout before this one have a field `s:<slug>` = bytes. Concurrent creates cannot pass the quota:
-- the check and the count are one script in the account's slot (all three keys share its hash tag).
-- KEYS: 1 quota hash, 2 the account's ledger stream (it exists once the account was granted credit),
--       3 the account's revoked set.
-- reserve: ARGV 1 'reserve', 2 slug, 3 bytes, 4 max count, 5 max bytes, 6 max count while never funded,
--          7 the new field's value `<created ms>:<bytes>` (base 36) → 'ok' | 'count' | 'bytes' | 'unfunded'.
-- release (revoked) / drop (never stored): ARGV 1 'release' | 'drop', 2 slug, 3 now ms, 4 max revoked,
--          5 retention ms → { 1 when the share was counted else 0, slugs whose tombstones to delete… }.
local legacy = 's:' .. ARGV[2]
if ARGV[1] ~= 'reserve' then
  local counted = 0
  local b = redis.call('HGET', KEYS[1], legacy)
  if b then
    redis.call('HDEL', KEYS[1], legacy)
    counted = 1
  else
    local v = redis.call('HGET', KEYS[1], ARGV[2])
    if v then
      redis.call('HDEL', KEYS[1], ARGV[2])
      local rest = string.sub(v, string.find(v, ':', 1, true) + 1)
      -- `…:-`: a share revoked before revoked shares left the index; nothing to give back.
      if rest ~= '-' then
        b = tonumber(rest, 36)
        counted = 1
      end
    end
  end
  if counted == 1 then
    redis.call('HINCRBY', KEYS[1], 'count', -1)
    redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(b))
  end
  if ARGV[1] == 'drop' then return { counted } end
  -- Revoked: remembered (for the console, and so its tombstone can be bounded) by revoke time; those past
  -- the retention (their tombstone has expired) are forgotten, and past the newest `max revoked` the oldest
  -- are returned for the caller to delete their tombstones (another slot on a Cluster).
  local now = tonumber(ARGV[3])
  local retention = tonumber(ARGV[5])
  -- Scores strictly increase (two revokes in one ms, or clocks of two instances a little apart): the oldest
  -- revoked is always the first pushed out.
  local newest = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) >= now then now = tonumber(newest[2]) + 1 end
  redis.call('ZADD', KEYS[3], 'NX', now, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - retention)
  local out = { counted }
  local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[4])
  if over > 0 then
    local popped = redis.call('ZPOPMIN', KEYS[3], over)
    for i = 1, #popped, 2 do out[#out + 1] = popped[i] end
  end
  redis.call('PEXPIRE', KEYS[3], retention)
  return out
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
