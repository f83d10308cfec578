-- Counts a new key into its account's key set under the account's caps (SPEC §13: "bounds keys made"):
-- limits.max_keys_per_account, the keys it holds, and limits.max_keys_made_per_day, the keys it made this
-- UTC day. The checks, the SADD and the day's INCR are one script in the account's slot, so concurrent
-- creates cannot pass either. The set holds every key the account has, disabled or expired ones too (they
-- count); DELETE /admin/keys/{id} removes a key from it but not from the day's count: each key id made
-- writes usage cells kept usage.retention_days, so creating, using and deleting keys must not be free.
-- A roll's new key (ARGV 5, the old key's id) also claims the old key's one successor in the same step
-- (SPEC §15: a key rolls once), so concurrent rolls of one key make one key, whatever instance runs them.
-- KEYS: 1 the account's key set, 2 its count of keys made on the key's UTC day, 3 its rolled keys (hash:
-- old key id → new key id).
-- ARGV: 1 key id, 2 held cap (0: none), 3 daily bound (0: none), 4 the day count's TTL in seconds,
-- 5 the id of the key this one is rolled from ('' for a create).
-- → 1 added (or already there: not counted again), 0 at the held cap, -1 at the daily bound, or the
-- claim the old key already has (a string: the successor's id, '~' + id while still pending).
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return 1
end
if ARGV[5] ~= '' then
  local successor = redis.call('HGET', KEYS[3], ARGV[5])
  if successor then
    return successor
  end
end
local max = tonumber(ARGV[2])
if max > 0 and redis.call('SCARD', KEYS[1]) >= max then
  return 0
end
local perDay = tonumber(ARGV[3])
if perDay > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= perDay then
  return -1
end
redis.call('SADD', KEYS[1], ARGV[1])
-- Counted with or without a bound (a bound set later sees today's keys); gone two days on, costing nothing.
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
if ARGV[5] ~= '' then
  -- Pending ('~' + id) until the new key is stored and confirm-roll.lua confirms it: a claim left pending
  -- (its writes failed, its process died) may be dropped by a later roll (drop-claim.lua), a confirmed one never.
  redis.call('HSET', KEYS[3], ARGV[5], '~' .. ARGV[1])
end
return 1
