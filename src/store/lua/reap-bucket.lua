-- Empty one hold bucket whose due time has passed (every hold in it has expired), one slice per call
-- (HSCAN, ~500 fields) so a bucket of a busy account never blocks Redis for long. Each open hold is
-- released with a hold_expired ledger entry (amount 0, the hold recorded) and remembered as
-- 'r<amount>', so a settle that comes later still debits once; settled fields ('=') are dropped, their
-- work as idempotency records done. Fields are independent, so slices need not be one transaction.
-- The first slice marks the account reaped through this due time, so from then on a hold replayed into
-- the bucket is refused (hold.lua) and nothing is written into it by a settle (settle.lua). The last
-- slice gives what is remembered ('r', '+') ARGV[3] seconds (the hold TTL + the settle retry window);
-- an emptied hash is gone by itself.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream (all {acct:<id>})
-- ARGV: 1 the bucket's due time (ms), 2 ts, 3 seconds to remember reaped holds, 4 HSCAN cursor ('0' first)
-- Returns {next cursor ('0' when done), holds released}.
if ARGV[4] == '0' then
  local through = redis.call('HGET', KEYS[1], 'reaped')
  if not through or tonumber(ARGV[1]) > tonumber(through) then redis.call('HSET', KEYS[1], 'reaped', ARGV[1]) end
end
local scan = redis.call('HSCAN', KEYS[2], ARGV[4], 'COUNT', 500)
local fields = scan[2]
local drop = {}
local reaped = {}
local released = 0
for i = 1, #fields, 2 do
  local field, v = fields[i], fields[i + 1]
  local state = string.sub(v, 1, 1)
  if state == 'o' then
    local amount = string.sub(v, 2)
    released = released + tonumber(amount)
    redis.call('XADD', KEYS[3], '*', 'kind', 'hold_expired', 'amount_micros', 0, 'ts', ARGV[2],
      'request_id', field, 'hold_micros', amount)
    reaped[#reaped + 1] = field
    reaped[#reaped + 1] = 'r' .. amount
  elseif state == '=' then
    drop[#drop + 1] = field
  end
end
if #drop > 0 then redis.call('HDEL', KEYS[2], unpack(drop)) end
if #reaped > 0 then redis.call('HSET', KEYS[2], unpack(reaped)) end
if released > 0 then redis.call('HINCRBY', KEYS[1], 'held', 0 - released) end
if scan[1] == '0' and redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return {scan[1], #reaped / 2}
