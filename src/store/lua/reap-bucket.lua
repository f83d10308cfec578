-- Empty one hold bucket whose due time has passed (every hold in it has expired): each open hold is
-- released with a hold_expired ledger entry (amount 0, the hold recorded) and remembered as
-- 'r<amount>' so a settle that comes later still debits once; settled fields ('=') are dropped, their
-- work as idempotency records done. What is remembered ('r', '+') stays ARGV[3] seconds (the hold TTL
-- + the settle retry window); an empty bucket is deleted. Marks the account reaped through this due
-- time, so a hold replayed into an emptied bucket is refused (hold.lua).
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream (all {acct:<id>})
-- ARGV: 1 the bucket's due time (ms), 2 ts, 3 seconds to remember reaped holds
-- Returns how many holds were released.
local all = redis.call('HGETALL', KEYS[2])
local kept = {}
local released = 0
local n = 0
local changed = false
for i = 1, #all, 2 do
  local field, v = all[i], all[i + 1]
  local state = string.sub(v, 1, 1)
  if state == 'o' then
    local amount = string.sub(v, 2)
    released = released + tonumber(amount)
    n = n + 1
    redis.call('XADD', KEYS[3], '*', 'kind', 'hold_expired', 'amount_micros', 0, 'ts', ARGV[2],
      'request_id', field, 'hold_micros', amount)
    kept[#kept + 1] = field
    kept[#kept + 1] = 'r' .. amount
    changed = true
  elseif state == '=' then
    changed = true
  else
    kept[#kept + 1] = field
    kept[#kept + 1] = v
  end
end
if #kept == 0 then
  redis.call('UNLINK', KEYS[2])
elseif changed then
  redis.call('UNLINK', KEYS[2])
  -- In slices: unpack() of a very long list would overflow Lua's C stack.
  for i = 1, #kept, 1000 do
    redis.call('HSET', KEYS[2], unpack(kept, i, math.min(i + 999, #kept)))
  end
end
if #kept > 0 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
if released > 0 then redis.call('HINCRBY', KEYS[1], 'held', 0 - released) end
local through = redis.call('HGET', KEYS[1], 'reaped')
if not through or tonumber(ARGV[1]) > tonumber(through) then redis.call('HSET', KEYS[1], 'reaped', ARGV[1]) end
return n
