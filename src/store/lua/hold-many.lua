-- Group commit of holds (docs/ledger.md "Group commit"): the holds one process issued in one event-loop
-- turn for one slot, in one call. Each request is checked and recorded exactly as hold.lua does it, in the
-- order given: one refused hold never fails another, and each sees the holds before it in the batch. An
-- account's balance hash is read once per call and its 'held' written once (the batch's sum), and each
-- hold bucket read once (HMGET of the batch's request ids) and written once (HSET of the holds taken), so a
-- hot account pays four calls per batch, whatever its size.
-- KEYS: per request, in order: its balance hash, its hold bucket, and for a key with a budget its counter
--       — or none when they are the previous request's (a hot account sends them once).
-- ARGV: per request 4 values: 1 its number of keys (2, or 3 with a budget; 0: the previous request's),
--       2 request id, 3 amount_micros,
--       4 the bucket's due time (ms); with a budget 2 more: 5 the budget's limit, 6 the counter's expiry
--       ('' = none).
-- Returns a flat array, 4 values per request, in order: hold.lua's code, balance, held, and the budget's
-- use (0 unless refused by it); or an error reply then three 0s for a request that failed on its own (the
-- others are not affected). Flat, because a table per request costs Redis more than the request's hold.
-- Globals read once: a global is a table lookup by name on every use, which the loop below would pay
-- per request (bench/results/redis-instructions.md).
local call, tonumber, sub, unpack = redis.call, tonumber, string.sub, unpack
local KEYS, ARGV = KEYS, ARGV
local accounts = {}
local nargs = #ARGV
local order = {}
local out = {}
local now
-- The request ids this batch asks each bucket about (a pass over the arguments, no Redis call), so each
-- bucket is read with one HMGET and written with one HSET instead of an HSETNX per request.
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
    if kc == '3' then a = a + 6 else a = a + 4 end
  end
end
local known = {}
local writes = {}
local written = {}
-- The bucket's fields this batch asks about (request id -> value), read once; holds taken in this batch
-- are added as they are taken, so a replay later in the batch finds them.
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
-- Whether the request's field is in its bucket: from the batch's read of it, or (a bucket asked about once) asked now.
local function exists(f, hk, id)
  if f then return f[id] end
  return call('HEXISTS', hk, id) == 1
end
-- One request's hold; `a` its first argument, `k` its first key.
local function hold(a, k, kc)
  local bk, hk = KEYS[k], KEYS[k + 1]
  local ck
  if kc == '3' then ck = KEYS[k + 2] end
  local id, amount = ARGV[a + 1], ARGV[a + 2]
  local amt = tonumber(amount)
  local s = accounts[bk]
  if not s then
    local b = call('HMGET', bk, 'balance', 'held', 'reaped')
    s = { bal = tonumber(b[1] or '0'), held = tonumber(b[2] or '0'), reaped = b[3] and tonumber(b[3]), add = 0 }
    accounts[bk] = s
    order[#order + 1] = bk
  end
  local r, used
  if s.reaped and tonumber(ARGV[a + 3]) <= s.reaped then return -1, s.bal, s.held end
  -- A bucket this batch asks about once is used as hold.lua does (HEXISTS / HSETNX): no read ahead.
  local f
  if #wanted[hk] > 1 then f = fields(hk) end
  if s.bal - s.held < amt then
    if exists(f, hk, id) then r = 2 else r = 0 end
  else
    local stale
    local fresh
    if ck then
      -- hold.lua's budget check, on the counter as the holds before this one in the batch left it.
      if not now then
        local t = call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      local c = call('HGETALL', ck)
      fresh = #c == 0
      used = 0
      for i = 1, #c, 2 do
        local name = c[i]
        if name == 's' then
          used = used + tonumber(c[i + 1])
        elseif tonumber(sub(name, 2)) > now then
          used = used + tonumber(c[i + 1])
        else
          stale = stale or {}
          stale[#stale + 1] = name
        end
      end
      if used + amt > tonumber(ARGV[a + 4]) then
        if exists(f, hk, id) then r = 2 else r = -2 end
      end
    end
    if not r then
      local taken
      if not f then
        taken = call('HSETNX', hk, id, 'o' .. amount) == 1
      elseif not f[id] then
        -- Taken: the field is written with the bucket's others after the loop.
        taken = true
        f[id] = 'o' .. amount
        local w = writes[hk]
        if not w then
          w = {}
          writes[hk] = w
          written[#written + 1] = hk
        end
        w[#w + 1] = id
        w[#w + 1] = f[id]
      end
      if not taken then
        r = 2
      else
        s.held = s.held + amt
        s.add = s.add + amt
        r = 1
        if ck then
          call('HINCRBY', ck, 'h' .. ARGV[a + 3], amount)
          if stale then call('HDEL', ck, unpack(stale)) end
          if fresh and ARGV[a + 5] ~= '' then call('PEXPIREAT', ck, ARGV[a + 5]) end
        end
      end
    end
  end
  if r ~= -2 then used = 0 end
  return r, s.bal, s.held, used
end
-- Each request in a protected call: an error fails that request alone, and the holds taken so far still
-- count in the account's 'held' below.
local a, n = 1, 0
local kn, k, kc = 1, 1, nil
while a <= nargs do
  local c = ARGV[a]
  if c ~= '0' then
    k, kc = kn, c
    kn = kn + tonumber(c)
  end
  local ok, r, x, y, z = pcall(hold, a, k, kc)
  if kc == '3' then a = a + 6 else a = a + 4 end
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
  if s.add ~= 0 then call('HINCRBY', bk, 'held', string.format('%d', s.add)) end
end
return out
