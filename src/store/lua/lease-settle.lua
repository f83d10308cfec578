-- Settles of requests whose holds one process drew from a credit lease (docs/ledger.md "Leases"), and the
-- lease's undrawn part given back, in one pass. A lease is a hold of its own in the requests' bucket
-- (field = the lease's id, 'o<amount>' while open), taken by hold.lua; the requests drawn from it have no
-- field until they settle. Each settle is checked on its own, in the order given:
--   its field '=' or '+': a replay; the first entry id, nothing debited;
--   absent, the lease open with at least the draw left: debit, release the draw from 'held' and the
--     lease, '=<entry id>' (settle.lua's 'o' case);
--   absent, the lease reaped ('r') or closed ('='): debit with hold_micros 0 (the reaper or the give-back
--     already released it), '+<entry id>' (settle.lua's 'r' case);
--   any other field, or no lease field at all (the bucket lost or gone): '?', left untouched; the store
--     settles it alone with the whole settle.lua.
-- Then the give-back (at most what is left), and the lease becomes '=' once nothing is left in it (the
-- reaper drops it; a lease reaped with something left writes hold_expired for it, as for any hold).
-- The common case — the lease open with the draws' total left, and no settle's field there yet — goes in
-- one loop that runs no check per request: each settle is then new and releases its draw.
-- KEYS: 1 balance hash, 2 hold bucket, 3 ledger stream.
-- ARGV: 1 the lease's field, 2 the give-back (µ-credits as text, '0' for none), 3 ns, 4 the settles'
--       debit (0 - Σ cost, as text), 5 their draws' total (as text; '-' when a request id occurs twice,
--       which only the per-request loop can take), then the ns settles' request ids,
--       their debits ('0 - cost' as text), their entry data (settle.lua's ARGV[3]), their draws (as text).
-- Returns {balance, held, 1, then per settle its entry id} (the common case), or {balance, held, 0,
-- then per settle: entry id (or '?'), replayed (1/0)}.
local call, tonumber, sub, unpack = redis.call, tonumber, string.sub, unpack
local ARGV = ARGV
local lf = ARGV[1]
local ns = tonumber(ARGV[3])
local have = call('HMGET', KEYS[2], lf, unpack(ARGV, 6, 5 + ns))
local lv = have[1]
local left
if lv and sub(lv, 1, 1) == 'o' then left = tonumber(sub(lv, 2)) end
local dq, dd, dh = 5 + ns, 5 + 2 * ns, 5 + 3 * ns
local out = { 0, 0, 0 }
local w, nw = {}, 0
-- The fields this call wrote, so a request settled twice in it replays the second time.
local done = {}
local debit, release = 0, 0
local lk = KEYS[3]
local common = left and ARGV[5] ~= '-' and left >= tonumber(ARGV[5])
if common then
  for i = 2, ns + 1 do
    if have[i] then
      common = false
      break
    end
  end
end
if common then
  out[3] = 1
  for i = 1, ns do
    local x = call('XADD', lk, '*', 'd', ARGV[dd + i], 'h', ARGV[dh + i])
    out[3 + i] = x
    w[nw + 1], w[nw + 2] = ARGV[5 + i], '=' .. x
    nw = nw + 2
  end
  left = left - tonumber(ARGV[5])
  release = tonumber(ARGV[5])
  debit = tonumber(ARGV[4])
  ns = 0
end
for i = 1, ns do
  local v = have[i + 1] or done[ARGV[5 + i]]
  if v then
    local st = sub(v, 1, 1)
    if st == '=' or st == '+' then
      out[2 * i + 2], out[2 * i + 3] = sub(v, 2), 1
    else
      out[2 * i + 2], out[2 * i + 3] = '?', 0
    end
  elseif not lv then
    out[2 * i + 2], out[2 * i + 3] = '?', 0
  else
    local draw = ARGV[dh + i]
    local hold, mark = '0', '+'
    if left then
      local d = tonumber(draw)
      if d <= left then
        left = left - d
        release = release + d
        hold, mark = draw, '='
      end
    end
    local x = call('XADD', lk, '*', 'd', ARGV[dd + i], 'h', hold)
    debit = debit + tonumber(ARGV[dq + i])
    out[2 * i + 2], out[2 * i + 3] = x, 0
    w[nw + 1], w[nw + 2] = ARGV[5 + i], mark .. x
    done[ARGV[5 + i]] = mark .. x
    nw = nw + 2
  end
end
if left then
  local give = tonumber(ARGV[2])
  if give > left then give = left end
  left = left - give
  release = release + give
  w[nw + 1] = lf
  if left > 0 then w[nw + 2] = 'o' .. string.format('%d', left) else w[nw + 2] = '=' end
  nw = nw + 2
end
if nw > 0 then call('HSET', KEYS[2], unpack(w)) end
if release > 0 then
  out[2] = call('HINCRBY', KEYS[1], 'held', string.format('%d', 0 - release))
else
  out[2] = tonumber(call('HGET', KEYS[1], 'held') or '0')
end
if debit ~= 0 then
  out[1] = call('HINCRBY', KEYS[1], 'balance', string.format('%d', debit))
else
  out[1] = tonumber(call('HGET', KEYS[1], 'balance') or '0')
end
return out
