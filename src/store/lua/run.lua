-- A run (docs/ledger.md "Runs"): one account's settles and holds of one event-loop turn, in one pass that
-- runs no Lua per request beyond its field and its debit entry. All of one hold bucket, none with a key
-- budget, each request id once; either kind may be absent. The settles are taken first, each exactly as
-- settle.lua's common case takes it (its field still the open hold the store expects, 'o' .. its hold;
-- its own debit entry), then the holds, each exactly as hold.lua takes it against the balance the settles
-- left: the account covers their total (after the run, balance ≥ held), the bucket is not stale, no hold's
-- id is in the bucket yet.
-- Every check comes before the first write, so a declined run writes nothing and answers {0}: the store
-- then sends the same calls through settle-many.lua / hold-many.lua, which check each on its own. The
-- account's hash is read once (only when there are holds: the settles need no check of it) and written
-- once per field, the bucket read once (HMGET of every id) and written once (HSET of every field).
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream (only with settles).
-- ARGV: 1 the settles' debit (0 - Σ cost, as text), 2 the change of 'held' (Σ hold amount - Σ settled
--       hold, as text), 3 the bucket's due time (ms), 4 ns, 5 nh, then the ns settles' request ids, the nh
--       holds' request ids, the ns debit entries' data (settle.lua's ARGV[3]), the ns settles' holds (the
--       amounts, as text), the nh holds' field values ('o<amount>').
-- Returns {1, balance, held, entry id 1, …, entry id ns}: balance and held after the run (the HINCRBY
-- replies, or the fields as they were when a sum is 0); the store works out each request's answer.
local call, ARGV = redis.call, ARGV
local ns, nh = tonumber(ARGV[4]), tonumber(ARGV[5])
local bal, held
if nh > 0 then
  local b = call('HMGET', KEYS[1], 'balance', 'held', 'reaped')
  bal, held = tonumber(b[1] or '0'), tonumber(b[2] or '0')
  if b[3] and tonumber(ARGV[3]) <= tonumber(b[3]) then return { 0 } end
  -- The holds' total fits in what the settles leave (balance - debits - (held - released)) exactly when
  -- the balance after the run covers 'held' after it. Amounts are never negative, so then each hold,
  -- taken one after the other, fits too.
  if bal + tonumber(ARGV[1]) < held + tonumber(ARGV[2]) then return { 0 } end
end
local have = call('HMGET', KEYS[2], unpack(ARGV, 6, 5 + ns + nh))
local d = 5 + ns + nh
local h, v = d + ns, d + 2 * ns
for i = 1, ns do
  if have[i] ~= 'o' .. ARGV[h + i] then return { 0 } end
end
for i = ns + 1, ns + nh do
  if have[i] then return { 0 } end
end
local out = { 1, 0, 0 }
local w = {}
if ns > 0 then
  local lk = KEYS[3]
  for i = 1, ns do
    local hold = ARGV[h + i]
    local id = call('XADD', lk, '*', 'd', ARGV[d + i], 'h', hold)
    w[2 * i - 1] = ARGV[5 + i]
    w[2 * i] = '=' .. id
    out[3 + i] = id
  end
end
for i = 1, nh do
  w[2 * (ns + i) - 1] = ARGV[5 + ns + i]
  w[2 * (ns + i)] = ARGV[v + i]
end
call('HSET', KEYS[2], unpack(w))
if ARGV[2] ~= '0' then held = call('HINCRBY', KEYS[1], 'held', ARGV[2])
elseif not held then held = tonumber(call('HGET', KEYS[1], 'held') or '0') end
if ARGV[1] ~= '0' then bal = call('HINCRBY', KEYS[1], 'balance', ARGV[1])
elseif not bal then bal = tonumber(call('HGET', KEYS[1], 'balance') or '0') end
out[2], out[3] = bal, held
return out
