-- A run of settles (docs/ledger.md "Runs"): two or more settles one process issued in one event-loop turn
-- for one account, all of holds in the same bucket, none with a key budget, each request id once. When
-- every request's field is still its open hold as the store expects it ('o<amount>', the amount it held),
-- each is settled exactly as settle.lua's common case does it, with its own debit entry, in one pass:
-- one HMGET of the run's fields, an XADD per request, one HSET of the settled fields, one HINCRBY each of
-- 'held' and 'balance' with the run's sums (their replies are the balance and held after the run, so the
-- balance hash is not read). Otherwise (a replay, a reaped or absent hold, a hold of another amount)
-- nothing is written and {0} is returned: the store then sends the same settles through settle-many.lua,
-- which settles each on its own. Every XADD goes to the same stream: if the first one fails (a key of the
-- wrong type), nothing was written and the whole call fails, as settle.lua would.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the run's debit (0 - Σ cost, as text), 2 its release (0 - Σ hold, as text), 3 n, then n request
--       ids, n debit entries' data (settle.lua's ARGV[3]), n holds (the amounts, as text; the field each
--       expects is 'o' .. its hold).
-- Returns {1, balance, held, entry id 1, …, entry id n}: balance and held after the run; the store works
-- out each request's from the amounts.
local call, ARGV = redis.call, ARGV
local n = tonumber(ARGV[3])
local have = call('HMGET', KEYS[2], unpack(ARGV, 4, 3 + n))
local d, h = 3 + n, 3 + 2 * n
for i = 1, n do
  if have[i] ~= 'o' .. ARGV[h + i] then return { 0 } end
end
local lk = KEYS[3]
local out = { 1, 0, 0 }
local w = {}
for i = 1, n do
  local hold = ARGV[h + i]
  local id = call('XADD', lk, '*', 'd', ARGV[d + i], 'h', hold)
  w[2 * i - 1] = ARGV[3 + i]
  w[2 * i] = '=' .. id
  out[3 + i] = id
end
call('HSET', KEYS[2], unpack(w))
-- A sum of 0 writes nothing: its field is read instead (unchanged by the run).
if ARGV[2] ~= '0' then out[3] = call('HINCRBY', KEYS[1], 'held', ARGV[2])
else out[3] = tonumber(call('HGET', KEYS[1], 'held') or '0') end
if ARGV[1] ~= '0' then out[2] = call('HINCRBY', KEYS[1], 'balance', ARGV[1])
else out[2] = tonumber(call('HGET', KEYS[1], 'balance') or '0') end
return out
