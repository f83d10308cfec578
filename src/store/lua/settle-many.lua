-- Group commit of settles (docs/ledger.md "Group commit"): the settles one process issued in one
-- event-loop turn for one slot, in one call. Each request is settled exactly as settle.lua's common case
-- does it, in the order given, each with its own debit entry: a replay (also of a request settled earlier
-- in the same batch) debits nothing and returns the first entry id. An account's balance hash is read
-- once per call and written once (HINCRBY of the batch's sums), and each hold bucket read once (HMGET of
-- the batch's request ids) and written once (HSET of the settled fields): per request, only its XADD.
-- A request whose field is absent from its bucket (no hold reached it, or a hold of the previous layout)
-- is answered {'?'} and left untouched: the store settles it alone with the whole settle.lua.
-- KEYS: per request, in order: its balance hash, its hold bucket, its ledger stream, and for a key with a
--       budget its counter.
-- ARGV: per request 13 values: 1 its number of keys (3, or 4 with a budget), then settle.lua's ARGV 1-12
--       (2 request id, 3 the debit's amount "0 - cost" as text, 4 ts, 5 key id, 6 model, 7 prompt tokens,
--       8 completion tokens, 9 usage source, 10 may have run (unused here: only the absent case reads it),
--       11 the bucket's due time, 12 the counter's expiry ('' = none), 13 cached prompt tokens ('' = none)).
-- Returns one reply per request, in order: settle.lua's {entry id, replayed, balance, held, 0}, {'?'}, or
-- an error reply for a request that failed on its own (the others are not affected).
local accounts = {}
local order = {}
local out = {}
local k = 1
-- The request ids this batch asks each bucket about (a pass over the arguments, no Redis call), so each
-- bucket is read with one HMGET and written with one HSET instead of an HGET and an HSET per request.
local wanted = {}
do
  local kk = 1
  for a = 1, #ARGV, 13 do
    local hk = KEYS[kk + 1]
    local list = wanted[hk]
    if not list then
      list = {}
      wanted[hk] = list
    end
    list[#list + 1] = ARGV[a + 1]
    if ARGV[a] == '4' then kk = kk + 4 else kk = kk + 3 end
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
    local vals = redis.call('HMGET', hk, unpack(list))
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
    local b = redis.call('HMGET', bk, 'balance', 'held')
    s = { bal = tonumber(b[1] or '0'), held = tonumber(b[2] or '0'), dbal = 0, dheld = 0 }
    accounts[bk] = s
    order[#order + 1] = bk
  end
  return s
end
-- One request's settle; `a` its first argument, `k` its first key.
local function settle(a, k)
  local bk, hk, lk = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local ck
  if ARGV[a] == '4' then ck = KEYS[k + 3] end
  local id, amount = ARGV[a + 1], ARGV[a + 2]
  -- A bucket this batch asks about once is used as settle.lua does (HGET, then HSET): no read ahead.
  local f
  local v
  if #wanted[hk] > 1 then
    f = fields(hk)
    v = f[id]
  else
    v = redis.call('HGET', hk, id)
  end
  if not v then return { '?' } end
  local state = string.sub(v, 1, 1)
  local hold = '0'
  local charged = false
  local mark = '='
  local prev
  if state == 'o' then
    hold = string.sub(v, 2)
    charged = true
  elseif state == 'r' then
    mark = '+'
  else
    prev = string.sub(v, 2)
  end
  local s = account(bk)
  if prev then return { prev, 1, s.bal, s.held, 0 } end
  local xid
  local cached = ARGV[a + 12]
  if cached ~= '' then
    xid = redis.call('XADD', lk, '*', 'kind', 'debit', 'amount_micros', amount, 'ts', ARGV[a + 3],
      'request_id', id, 'key_id', ARGV[a + 4], 'model', ARGV[a + 5], 'prompt_tokens', ARGV[a + 6],
      'completion_tokens', ARGV[a + 7], 'usage_source', ARGV[a + 8], 'hold_micros', hold, 'cached_tokens', cached)
  else
    xid = redis.call('XADD', lk, '*', 'kind', 'debit', 'amount_micros', amount, 'ts', ARGV[a + 3],
      'request_id', id, 'key_id', ARGV[a + 4], 'model', ARGV[a + 5], 'prompt_tokens', ARGV[a + 6],
      'completion_tokens', ARGV[a + 7], 'usage_source', ARGV[a + 8], 'hold_micros', hold)
  end
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
    redis.call('HSET', hk, id, mark .. xid)
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
      local cost = string.sub(amount, 2)
      first = redis.call('HINCRBY', ck, 's', cost) == tonumber(cost)
    end
    if charged and hold ~= '0' then
      local f = 'h' .. ARGV[a + 10]
      if redis.call('HINCRBY', ck, f, '-' .. hold) <= 0 then redis.call('HDEL', ck, f) end
    end
    if first and ARGV[a + 11] ~= '' then redis.call('PEXPIREAT', ck, ARGV[a + 11]) end
  end
  return { xid, 0, s.bal, s.held, 0 }
end
-- Each request in a protected call: an error (a key of the wrong type, say) fails that request alone,
-- and the sums of every debit written so far are still applied below.
for a = 1, #ARGV, 13 do
  local ok, r = pcall(settle, a, k)
  if ARGV[a] == '4' then k = k + 4 else k = k + 3 end
  if ok then
    out[#out + 1] = r
  elseif type(r) == 'table' and r.err then
    out[#out + 1] = r
  else
    out[#out + 1] = { err = tostring(r) }
  end
end
for _, hk in ipairs(written) do
  redis.call('HSET', hk, unpack(writes[hk]))
end
for _, bk in ipairs(order) do
  local s = accounts[bk]
  if s.dheld ~= 0 then redis.call('HINCRBY', bk, 'held', string.format('%d', s.dheld)) end
  if s.dbal ~= 0 then redis.call('HINCRBY', bk, 'balance', string.format('%d', s.dbal)) end
end
return out
