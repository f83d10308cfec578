-- Settle a request: debit the actual cost, release its hold, append one debit entry; idempotent per
-- request id. The hold's own field in its bucket is the record (docs/ledger.md):
--   'o<amount>'  open: debit, release, and the field becomes '=<entry id>' (settled)
--   '=<id>'      settled: a replay, nothing debited, the first entry id returned
--   'r<amount>'  reaped (the reaper released it, with a hold_expired entry): debit once, field '+<id>'
--   '+<id>'      settled after a reap: a replay
--   absent       no hold reached this bucket: an old-layout hold or marker (before the upgrade), else a
--                settle without a hold (debited, hold_micros 0, field '=<id>') — unless an earlier attempt
--                of this settle may have run (ARGV[4] = '1') and the bucket was already emptied by the
--                reaper, where a settled field is gone too: then nothing is debited and '' is returned as
--                the entry id (the caller logs it for reconciliation). Into an emptied bucket nothing is
--                written (no reaper would visit it again; a late hold is refused there anyway, hold.lua).
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream (all {acct:<id>}); for the absent case also
--       4 old-layout holds hash, 5 old-layout settled marker. Called with 3 keys and 3 arguments first
--       (the common case: fewer arguments to copy into Lua), it answers {'?'} when the field is absent,
--       and the store calls it again with everything.
-- ARGV: 1 request id, 2 the debit's amount_micros (0 - cost, as text: "0" for a free request),
--       3 the debit entry's data, written as it is (docs/ledger.md "Debit entries": a JSON array the
--       store made of the entry's fields; the script adds only the hold it released),
--       4 '1' when an earlier attempt may have run, 5 the bucket's due time (ms)
-- A key with a budget (docs/keys.md) adds its budget counter as the last key (4 keys, or 6 for the whole
-- script) and always sends 6 arguments: 6 the counter's expiry (unix ms, '' = none). The cost joins
-- the counter's settled spend 's' and the hold leaves its open holds 'h<due>'.
-- Amounts stay text end to end (a Lua number would be formatted again for every command).
-- Returns {entry id, replayed (1/0), balance, held, wrote into a bucket no hold of it indexed (1/0)}.
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v and not KEYS[5] then return {'?'} end
local hold = '0'
local charged = false
local mark = '='
local fresh = 0
local prev
if v then
  local state = string.sub(v, 1, 1)
  if state == 'o' then
    hold = string.sub(v, 2)
    charged = true
  elseif state == 'r' then
    mark = '+'
  else
    prev = string.sub(v, 2)
  end
else
  -- Has the reaper emptied this bucket already? Then a record written now would never be cleaned.
  local through = redis.call('HGET', KEYS[1], 'reaped')
  local emptied = through and tonumber(ARGV[5]) <= tonumber(through)
  local old = redis.call('HGET', KEYS[4], ARGV[1])
  if old then
    hold = string.match(old, '^(%d+)')
    redis.call('HDEL', KEYS[4], ARGV[1])
  else
    prev = redis.call('GET', KEYS[5])
    if not prev and emptied and ARGV[4] == '1' then prev = '' end
  end
  if emptied then mark = nil else fresh = 1 end
end
if prev then
  local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
  return {prev, 1, tonumber(b[1] or '0'), tonumber(b[2] or '0'), 0}
end
-- "-0" is not an integer to HINCRBY: a hold of 0 releases nothing (and ARGV[2] is "0", never "-0").
local held
if hold ~= '0' then held = redis.call('HINCRBY', KEYS[1], 'held', '-' .. hold) end
local bal = redis.call('HINCRBY', KEYS[1], 'balance', ARGV[2])
if not held then held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') end
local id = redis.call('XADD', KEYS[3], '*', 'd', ARGV[3], 'h', hold)
if mark then redis.call('HSET', KEYS[2], ARGV[1], mark .. id) end
if #KEYS == 4 or #KEYS == 6 then
  local kb = KEYS[#KEYS]
  local first = false
  if ARGV[2] ~= '0' then
    local cost = string.sub(ARGV[2], 2)
    -- The counter's first spend (a new counter, maybe one made again after it expired): give it its expiry.
    first = redis.call('HINCRBY', kb, 's', cost) == tonumber(cost)
  end
  if charged and hold ~= '0' then
    local f = 'h' .. ARGV[5]
    if redis.call('HINCRBY', kb, f, '-' .. hold) <= 0 then redis.call('HDEL', kb, f) end
  end
  if first and ARGV[6] ~= '' then redis.call('PEXPIREAT', kb, ARGV[6]) end
end
return {id, 0, bal, held, fresh}
