-- A run of holds (docs/ledger.md "Runs"): two or more holds one process issued in one event-loop turn for
-- one account, all into the same hold bucket, none with a key budget, each request id once. When the
-- account can cover the run's total, its bucket is not stale, and none of the requests is in the bucket
-- yet, every hold of the run is taken, exactly as hold.lua taking them one after the other would (each
-- check passes, since the total fits), in one pass that runs no Lua per request: one HMGET of the run's
-- request ids, one HSET of their fields, one HINCRBY of 'held'. Otherwise nothing is written and {0} is
-- returned: the store then sends the same holds through hold-many.lua, which checks each on its own.
-- KEYS: 1 balance hash, 2 hold bucket.
-- ARGV: 1 the run's total amount (micros), 2 the bucket's due time (ms), 3 n, then n request ids, then
--       their n field values ('o<amount>', as hold.lua writes them).
-- Returns {1, balance, held before the run}: the store works out each request's held from the amounts.
local call, ARGV = redis.call, ARGV
local n = tonumber(ARGV[3])
local b = call('HMGET', KEYS[1], 'balance', 'held', 'reaped')
local bal, held = tonumber(b[1] or '0'), tonumber(b[2] or '0')
if b[3] and tonumber(ARGV[2]) <= tonumber(b[3]) then return { 0 } end
if bal - held < tonumber(ARGV[1]) then return { 0 } end
local have = call('HMGET', KEYS[2], unpack(ARGV, 4, 3 + n))
for i = 1, n do
  if have[i] then return { 0 } end
end
local w = {}
for i = 1, n do
  w[2 * i - 1] = ARGV[3 + i]
  w[2 * i] = ARGV[3 + n + i]
end
call('HSET', KEYS[2], unpack(w))
if ARGV[1] ~= '0' then call('HINCRBY', KEYS[1], 'held', ARGV[1]) end
return { 1, bal, held }
