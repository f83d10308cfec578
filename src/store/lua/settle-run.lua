-- A run of settles (docs/ledger.md "Runs"): two or more settles one process issued in one event-loop turn
-- for one account, all of holds in the same bucket, none with a key budget, each request id once. When
-- every request's field is still its open hold as the store expects it ('o<amount>', the amount it held),
-- each is settled exactly as settle.lua's common case does it, with its own debit entry, in one pass:
-- one HMGET of the run's fields, an XADD per request, one HSET of the settled fields, one HINCRBY each of
-- 'held' and 'balance' with the run's sums. Otherwise (a replay, a reaped or absent hold, a hold of
-- another amount) nothing is written and {0} is returned: the store then sends the same settles through
-- settle-many.lua, which settles each on its own. Every XADD goes to the same stream: if the first one
-- fails (a key of the wrong type), nothing was written and the whole call fails, as settle.lua would.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the run's debit (0 - Σ cost, as text), 2 its release (0 - Σ hold, as text), 3 n, then n request
--       ids, n expected field values ('o<amount>'), n debit entries' data (settle.lua's ARGV[3]), n holds
--       (the amounts, as text).
-- Returns {1, balance, held, entry id 1, …, entry id n}: balance and held before the run; the store works
-- out each request's from the amounts.
local call, ARGV = redis.call, ARGV
local n = tonumber(ARGV[3])
local have = call('HMGET', KEYS[2], unpack(ARGV, 4, 3 + n))
local e = 3 + n
for i = 1, n do
  if have[i] ~= ARGV[e + i] then return { 0 } end
end
local b = call('HMGET', KEYS[1], 'balance', 'held')
local out = { 1, tonumber(b[1] or '0'), tonumber(b[2] or '0') }
local lk = KEYS[3]
local d, h = 3 + 2 * n, 3 + 3 * n
local w = {}
for i = 1, n do
  local hold = ARGV[h + i]
  local id = call('XADD', lk, '*', 'd', ARGV[d + i], 'h', hold)
  w[2 * i - 1] = ARGV[3 + i]
  w[2 * i] = '=' .. id
  out[3 + i] = id
end
call('HSET', KEYS[2], unpack(w))
if ARGV[2] ~= '0' then call('HINCRBY', KEYS[1], 'held', ARGV[2]) end
if ARGV[1] ~= '0' then call('HINCRBY', KEYS[1], 'balance', ARGV[1]) end
return out
