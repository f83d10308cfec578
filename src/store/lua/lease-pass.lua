-- A packed lease pass (docs/ledger.md "Packed passes", `store.debit_entries: packed`): lease-settle.lua's
-- common case — the lease open with the draws' total left, none of the requests' fields there yet, each
-- request id once, no give-back — with the pass's debits in few ledger entries: each entry `p`, up to
-- PACKED_DEBITS_MAX (debit-layout.ts) debits' data as one JSON array of their compact `d` arrays, and `h`,
-- their holds as one JSON array (each request's draw, which the common case releases); an entry of one
-- debit is the plain compact entry (`d`, `h`). Per request the script then handles only its field (read
-- once with the others, written once with the others, as `=<entry id>.<k>`, or `=<entry id>` in an entry
-- of one: the idempotency record, so a retried or resent settle finds it and replays, as lease-settle.lua's
-- fields do); its debit's data crosses into Redis inside its entry's one argument.
-- Anything else declines, writing nothing ({0}): the store then sends the same settles as lease-settle.lua.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the lease's field, 2 ns (≥ 1), 3 the settles' debit (0 - Σ cost, as text), 4 their draws'
--       total (as text), 5 ne, the entries, then per entry: its number of debits, its `p` (or `d` for
--       one), its `h`; then the ns request ids, in the entries' order.
-- Returns {balance, held, 1, entry id 1, …, entry id ne} after the pass, or {0}.
local call, tonumber, sub, unpack = redis.call, tonumber, string.sub, unpack
local ARGV = ARGV
-- `.<k>` as constants: `m .. k` formats the number each time, ~1k instructions a request
-- (bench/results/packed-pass.md); PACKED_DEBITS_MAX (16) of them, the `or` for any past it.
local KS = { '.1', '.2', '.3', '.4', '.5', '.6', '.7', '.8', '.9', '.10', '.11', '.12', '.13', '.14', '.15', '.16' }
local lf = ARGV[1]
local ns = tonumber(ARGV[2])
local ne = tonumber(ARGV[5])
local ids = 6 + 3 * ne
local have = call('HMGET', KEYS[2], lf, unpack(ARGV, ids, ids + ns - 1))
local lv = have[1]
if not lv or sub(lv, 1, 1) ~= 'o' then return { 0 } end
local left = tonumber(sub(lv, 2))
local drawn = tonumber(ARGV[4])
if left < drawn then return { 0 } end
for i = 2, ns + 1 do
  if have[i] then return { 0 } end
end
local out = { 0, 0, 1 }
local w = {}
local r = 0
for e = 1, ne do
  local a = 3 + 3 * e
  local n = tonumber(ARGV[a])
  local x
  if n == 1 then
    x = call('XADD', KEYS[3], '*', 'd', ARGV[a + 1], 'h', ARGV[a + 2])
    w[2 * r + 1], w[2 * r + 2] = ARGV[ids + r], '=' .. x
    r = r + 1
  else
    x = call('XADD', KEYS[3], '*', 'p', ARGV[a + 1], 'h', ARGV[a + 2])
    local m = '=' .. x
    for k = 1, n do
      w[2 * r + 1], w[2 * r + 2] = ARGV[ids + r], m .. (KS[k] or '.' .. k)
      r = r + 1
    end
  end
  out[3 + e] = x
end
left = left - drawn
w[2 * ns + 1] = lf
if left > 0 then w[2 * ns + 2] = 'o' .. string.format('%d', left) else w[2 * ns + 2] = '=' end
call('HSET', KEYS[2], unpack(w))
if drawn > 0 then
  out[2] = call('HINCRBY', KEYS[1], 'held', string.format('%d', 0 - drawn))
else
  out[2] = tonumber(call('HGET', KEYS[1], 'held') or '0')
end
if ARGV[3] ~= '0' then
  out[1] = call('HINCRBY', KEYS[1], 'balance', ARGV[3])
else
  out[1] = tonumber(call('HGET', KEYS[1], 'balance') or '0')
end
return out
