-- Empty hold buckets whose due time has passed (every hold in them has expired), one slice of each per
-- call (HSCAN, ~500 fields) so a bucket of a busy account never blocks Redis for long. Each open hold is
-- released with a hold_expired ledger entry (amount 0, the hold recorded) and remembered as
-- 'r<amount>', so a settle that comes later still debits once; settled fields ('=') are dropped, their
-- work as idempotency records done. Fields are independent, so slices need not be one transaction.
-- A bucket's first slice marks its account reaped through the bucket's due time, so from then on a hold
-- replayed into it is refused (hold.lua) and nothing is written into it by a settle (settle.lua). The
-- last slice gives what is remembered ('r', '+') ARGV[2] seconds (the hold TTL + the settle retry
-- window); an emptied hash is gone by itself.
-- Several buckets per call (one script's fixed cost for many accounts with a request now and then) on a
-- single node; on Cluster one bucket per call, as every key of a call must share a slot.
-- KEYS: per bucket i, 3 keys from 3i-2: balance hash, hold bucket, ledger stream (all {acct:<id>})
-- ARGV: 1 ts, 2 seconds to remember reaped holds, then per bucket i: 2i+1 its due time (ms),
--       2i+2 its HSCAN cursor ('0' first)
-- Returns per bucket {next cursor ('0' when done, 'n' when not started: this call had done ~1,000
-- fields already), holds released}, flattened.
local out = {}
local budget = 1000
for b = 1, #KEYS / 3 do
  if budget <= 0 then
    out[#out + 1] = 'n'
    out[#out + 1] = 0
  else
    local bal, bucket, ledger = KEYS[3 * b - 2], KEYS[3 * b - 1], KEYS[3 * b]
    local due, cursor = ARGV[2 * b + 1], ARGV[2 * b + 2]
    if cursor == '0' then
      local through = redis.call('HGET', bal, 'reaped')
      if not through or tonumber(due) > tonumber(through) then redis.call('HSET', bal, 'reaped', due) end
    end
    local scan = redis.call('HSCAN', bucket, cursor, 'COUNT', 500)
    local fields = scan[2]
    budget = budget - #fields / 2
    local drop = {}
    local reaped = {}
    local released = 0
    local kept = false
    for i = 1, #fields, 2 do
      local field, v = fields[i], fields[i + 1]
      local state = string.sub(v, 1, 1)
      if state == 'o' then
        local amount = string.sub(v, 2)
        released = released + tonumber(amount)
        redis.call('XADD', ledger, '*', 'kind', 'hold_expired', 'amount_micros', 0, 'ts', ARGV[1],
          'request_id', field, 'hold_micros', amount)
        reaped[#reaped + 1] = field
        reaped[#reaped + 1] = 'r' .. amount
      elseif state == '=' then
        drop[#drop + 1] = field
      else
        kept = true
      end
    end
    if #drop > 0 then redis.call('HDEL', bucket, unpack(drop)) end
    if #reaped > 0 then redis.call('HSET', bucket, unpack(reaped)) end
    if released > 0 then redis.call('HINCRBY', bal, 'held', 0 - released) end
    -- Done: give what is left its lifetime; a bucket read in one slice with nothing left is gone already.
    if scan[1] == '0' and (cursor ~= '0' or kept or #reaped > 0) then redis.call('EXPIRE', bucket, ARGV[2]) end
    out[#out + 1] = scan[1]
    out[#out + 1] = #reaped / 2
  end
end
return out
