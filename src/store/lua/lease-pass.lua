-- A packed lease pass (docs/ledger.md "Packed passes", `store.debit_entries: packed`): lease-settle.lua's
-- common case — the lease open with the draws' total left, none of the requests' fields there yet, each
-- request id once, no give-back — with the pass's debits in ONE ledger entry: `p`, the debits' data as one
-- JSON array of their compact `d` arrays, and `h`, their holds as one JSON array (each request's draw, which
-- the common case releases). A pass of one request writes the plain compact entry (`d`, `h`). Per request
-- the script then handles only its field (read once with the others, written once with the others, as
-- `=<entry id>.<k>`: the idempotency record, so a retried or resent settle finds it and replays, as
-- lease-settle.lua's fields do); its debit's data crosses into Redis inside the one packed argument.
-- Anything else declines, writing nothing ({0}): the store then sends the same settles as lease-settle.lua.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the lease's field, 2 ns (≥ 1), 3 the settles' debit (0 - Σ cost, as text), 4 their draws'
--       total (as text), 5 the entry's `p` (ns > 1) or `d` (ns = 1), 6 its `h`, then the ns request ids.
-- Returns {balance, held, 1, entry id} after the pass (each request's entry id is `<entry id>.<k>`, k from
-- 1, for ns > 1; the entry id itself for ns = 1), or {0}.
local call, tonumber, sub, unpack = redis.call, tonumber, string.sub, unpack
local ARGV = ARGV
local lf = ARGV[1]
local ns = tonumber(ARGV[2])
local have = call('HMGET', KEYS[2], lf, unpack(ARGV, 7, 6 + ns))
local lv = have[1]
if not lv or sub(lv, 1, 1) ~= 'o' then return { 0 } end
local left = tonumber(sub(lv, 2))
local drawn = tonumber(ARGV[4])
if left < drawn then return { 0 } end
for i = 2, ns + 1 do
  if have[i] then return { 0 } end
end
local x
if ns == 1 then
  x = call('XADD', KEYS[3], '*', 'd', ARGV[5], 'h', ARGV[6])
else
  x = call('XADD', KEYS[3], '*', 'p', ARGV[5], 'h', ARGV[6])
end
local w = {}
if ns == 1 then
  w[1], w[2] = ARGV[7], '=' .. x
else
  local m = '=' .. x .. '.'
  for i = 1, ns do
    w[2 * i - 1], w[2 * i] = ARGV[6 + i], m .. i
  end
end
left = left - drawn
w[2 * ns + 1] = lf
if left > 0 then w[2 * ns + 2] = 'o' .. string.format('%d', left) else w[2 * ns + 2] = '=' end
call('HSET', KEYS[2], unpack(w))
local held
if drawn > 0 then
  held = call('HINCRBY', KEYS[1], 'held', string.format('%d', 0 - drawn))
else
  held = tonumber(call('HGET', KEYS[1], 'held') or '0')
end
local bal
if ARGV[3] ~= '0' then
  bal = call('HINCRBY', KEYS[1], 'balance', ARGV[3])
else
  bal = tonumber(call('HGET', KEYS[1], 'balance') or '0')
end
return { bal, held, 1, x }
