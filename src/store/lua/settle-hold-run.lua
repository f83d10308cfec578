-- A turn's settles and holds of one account in one pass (docs/ledger.md "Runs"): a run of settles and a
-- run of holds (one or more each) that one process issued in one event-loop turn for one account, all in
-- the same hold bucket, none with a key budget, each request id once. The settles are taken first, exactly
-- as settle-run.lua takes them, then the holds, exactly as hold-run.lua takes them against the balance
-- the settles left: every check of both before the first write, so a declined turn writes nothing and
-- answers {0} (the store then sends the settles and the holds as runs of their own). The account's hash
-- is read once and written once per field ('held' by the net of the holds and the releases, 'balance' by
-- the debits), the bucket read once (HMGET of every request id) and written once (HSET of every field).
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the settles' debit (0 - Σ cost, as text), 2 the change of 'held' (Σ hold amount - Σ settled
--       hold, as text), 3 the holds' total (Σ amount), 4 the bucket's due time (ms), 5 ns, 6 nh, then the
--       ns settles' request ids, the nh holds' request ids, the ns debit entries' data (settle.lua's
--       ARGV[3]), the ns settles' holds (the amounts, as text; the field each expects is 'o' .. its hold),
--       the nh holds' field values ('o<amount>').
-- Returns {1, balance, held, entry id 1, …, entry id ns}: balance and held before the turn; the store
-- works out each request's answer from the amounts.
local call, ARGV = redis.call, ARGV
local ns, nh = tonumber(ARGV[5]), tonumber(ARGV[6])
local b = call('HMGET', KEYS[1], 'balance', 'held', 'reaped')
local bal, held = tonumber(b[1] or '0'), tonumber(b[2] or '0')
-- The holds' checks (hold-run.lua) against the account after the settles: a stale bucket, the credit.
if b[3] and tonumber(ARGV[4]) <= tonumber(b[3]) then return { 0 } end
if bal + tonumber(ARGV[1]) - (held + tonumber(ARGV[2]) - tonumber(ARGV[3])) < tonumber(ARGV[3]) then return { 0 } end
local have = call('HMGET', KEYS[2], unpack(ARGV, 7, 6 + ns + nh))
local d = 6 + ns + nh
local h, v = d + ns, d + 2 * ns
for i = 1, ns do
  if have[i] ~= 'o' .. ARGV[h + i] then return { 0 } end
end
for i = ns + 1, ns + nh do
  if have[i] then return { 0 } end
end
local lk = KEYS[3]
local out = { 1, bal, held }
local w = {}
for i = 1, ns do
  local hold = ARGV[h + i]
  local id = call('XADD', lk, '*', 'd', ARGV[d + i], 'h', hold)
  w[2 * i - 1] = ARGV[6 + i]
  w[2 * i] = '=' .. id
  out[3 + i] = id
end
for i = 1, nh do
  w[2 * (ns + i) - 1] = ARGV[6 + ns + i]
  w[2 * (ns + i)] = ARGV[v + i]
end
call('HSET', KEYS[2], unpack(w))
if ARGV[2] ~= '0' then call('HINCRBY', KEYS[1], 'held', ARGV[2]) end
if ARGV[1] ~= '0' then call('HINCRBY', KEYS[1], 'balance', ARGV[1]) end
return out
