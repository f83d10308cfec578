-- Group commit of settles (docs/ledger.md "Group commit"): the settles one process issued in one
-- event-loop turn for one slot, in one call. Each request is settled exactly as settle.lua's common case
-- does it, in the order given, each with its own debit entry: a replay (also of a request settled earlier
-- in the same batch) debits nothing and returns the first entry id. An account's balance hash is read
-- once per call and written once (HINCRBY of the batch's sums), and each hold bucket read once (HMGET of
-- the batch's request ids) and written once (HSET of the settled fields): per request, only its XADD.
-- A request whose field is absent from its bucket (no hold reached it, or a hold of the previous layout)
-- is answered '?' and left untouched: the store settles it alone with the whole settle.lua.
-- KEYS: per request, in order: its balance hash, its hold bucket, its ledger stream, and for a key with a
--       budget its counter — or none when they are the previous request's (a hot account sends them once).
-- ARGV: per request 5 values: 1 its number of keys (3, or 4 with a budget; 0: the previous request's), 2 request id, 3 the debit's
--       amount "0 - cost" as text, 4 the debit entry's data (settle.lua's ARGV[3]), 5 the bucket's due
--       time (ms); for a key with a budget a 6th: the counter's expiry (unix ms, '' = none).
-- Returns a flat array, 4 values per request, in order: settle.lua's entry id, replayed, balance, held;
-- '?' then three 0s (absent); or an error reply then three 0s for a request that failed on its own (the
-- others are not affected). Flat, because a table per request costs Redis more than the request's XADD.
-- Globals read once: a global is a table lookup by name on every use, which the loop below would pay
-- per request (bench/results/redis-instructions.md).
local call, tonumber, sub, unpack = redis.call, tonumber, string.sub, unpack
local KEYS, ARGV = KEYS, ARGV
local accounts = {}
local nargs = #ARGV
local order = {}
local out = {}
-- The request ids this batch asks each bucket about (a pass over the arguments, no Redis call), so each
-- bucket is read with one HMGET and written with one HSET instead of an HGET and an HSET per request.
local wanted = {}
do
  local kn, kb, kc = 1, 1, nil
  local a = 1
  while a <= nargs do
    local c = ARGV[a]
    if c ~= '0' then
      kb, kc = kn, c
      kn = kn + tonumber(c)
    end
    local hk = KEYS[kb + 1]
    local list = wanted[hk]
    if not list then
      list = {}
      wanted[hk] = list
    end
    list[#list + 1] = ARGV[a + 1]
    if kc == '4' then a = a + 6 else a = a + 5 end
  end
end
local known = {}
local writes = {}
local written = {}
-- The bucket's fields this batch asks about (request id -> value), read once; a settle in this batch
-- updates its field here too, so a replay later in the batch finds it.
local function fields(hk)
  local f = known[hk]
  if not f then
    local list = wanted[hk]
    local vals = call('HMGET', hk, unpack(list))
    f = {}
    for i = 1, #list do
      if vals[i] then f[list[i]] = vals[i] end
    end
    known[hk] = f
  end
  return f
end
local function account(bk)
  local s = accounts[bk]
  if not s then
    local b = call('HMGET', bk, 'balance', 'held')
    s = { bal = tonumber(b[1] or '0'), held = tonumber(b[2] or '0'), dbal = 0, dheld = 0 }
    accounts[bk] = s
    order[#order + 1] = bk
  end
  return s
end
-- One request's settle; `a` its first argument, `k` its first key.
local function settle(a, k, kc)
  local bk, hk, lk = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local ck
  if kc == '4' then ck = KEYS[k + 3] end
  local id, amount = ARGV[a + 1], ARGV[a + 2]
  -- A bucket this batch asks about once is used as settle.lua does (HGET, then HSET): no read ahead.
  local f
  local v
  if #wanted[hk] > 1 then
    f = fields(hk)
    v = f[id]
  else
    v = call('HGET', hk, id)
  end
  if not v then return '?' end
  local state = sub(v, 1, 1)
  local hold = '0'
  local charged = false
  local mark = '='
  local prev
  if state == 'o' then
    hold = sub(v, 2)
    charged = true
  elseif state == 'r' then
    mark = '+'
  else
    prev = sub(v, 2)
  end
  local s = account(bk)
  if prev then return prev, 1, s.bal, s.held end
  local xid = call('XADD', lk, '*', 'd', ARGV[a + 3], 'h', hold)
  -- The entry is written: its debit and release join the account's sums (written once, at the end).
  if hold ~= '0' then
    local h = tonumber(hold)
    s.held = s.held - h
    s.dheld = s.dheld - h
  end
  local amt = tonumber(amount)
  s.bal = s.bal + amt
  s.dbal = s.dbal + amt
  if not f then
    call('HSET', hk, id, mark .. xid)
  else
    f[id] = mark .. xid
    local w = writes[hk]
    if not w then
      w = {}
      writes[hk] = w
      written[#written + 1] = hk
    end
    w[#w + 1] = id
    w[#w + 1] = f[id]
  end
  if ck then
    local first = false
    if amount ~= '0' then
      local cost = sub(amount, 2)
      first = call('HINCRBY', ck, 's', cost) == tonumber(cost)
    end
    if charged and hold ~= '0' then
      local f = 'h' .. ARGV[a + 4]
      if call('HINCRBY', ck, f, '-' .. hold) <= 0 then call('HDEL', ck, f) end
    end
    if first and ARGV[a + 5] ~= '' then call('PEXPIREAT', ck, ARGV[a + 5]) end
  end
  return xid, 0, s.bal, s.held
end
-- Each request in a protected call: an error (a key of the wrong type, say) fails that request alone,
-- and the sums of every debit written so far are still applied below.
local a, n = 1, 0
local kn, k, kc = 1, 1, nil
while a <= nargs do
  local c = ARGV[a]
  if c ~= '0' then
    k, kc = kn, c
    kn = kn + tonumber(c)
  end
  local ok, r, x, y, z = pcall(settle, a, k, kc)
  if kc == '4' then a = a + 6 else a = a + 5 end
  if not ok and (type(r) ~= 'table' or not r.err) then r = { err = tostring(r) } end
  out[n + 1] = r
  out[n + 2] = x or 0
  out[n + 3] = y or 0
  out[n + 4] = z or 0
  n = n + 4
end
for _, hk in ipairs(written) do
  call('HSET', hk, unpack(writes[hk]))
end
for _, bk in ipairs(order) do
  local s = accounts[bk]
  if s.dheld ~= 0 then call('HINCRBY', bk, 'held', string.format('%d', s.dheld)) end
  if s.dbal ~= 0 then call('HINCRBY', bk, 'balance', string.format('%d', s.dbal)) end
end
return out
