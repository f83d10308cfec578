-- Group commit of settles (docs/ledger.md "Group commit"): the settles one process issued in one
-- event-loop turn for one slot, in one call. Each request is settled exactly as settle.lua's common case
-- does it, in the order given, each with its own debit entry: a replay (also of a request settled earlier
-- in the same batch) debits nothing and returns the first entry id. An account's balance hash is read
-- once per call and written once (HINCRBY of the batch's sums).
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
  -- A request settled earlier in this batch: its field is written already, read like any other.
  local v = redis.call('HGET', hk, id)
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
    s.held = s.held - tonumber(hold)
    s.dheld = s.dheld - tonumber(hold)
  end
  s.bal = s.bal + tonumber(amount)
  s.dbal = s.dbal + tonumber(amount)
  redis.call('HSET', hk, id, mark .. xid)
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
  k = k + tonumber(ARGV[a])
  if ok then
    out[#out + 1] = r
  elseif type(r) == 'table' and r.err then
    out[#out + 1] = r
  else
    out[#out + 1] = { err = tostring(r) }
  end
end
for _, bk in ipairs(order) do
  local s = accounts[bk]
  if s.dheld ~= 0 then redis.call('HINCRBY', bk, 'held', string.format('%d', s.dheld)) end
  if s.dbal ~= 0 then redis.call('HINCRBY', bk, 'balance', string.format('%d', s.dbal)) end
end
return out
