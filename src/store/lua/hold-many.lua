-- Group commit of holds (docs/ledger.md "Group commit"): the holds one process issued in one event-loop
-- turn for one slot, in one call. Each request is checked and recorded exactly as hold.lua does it, in the
-- order given: one refused hold never fails another, and each sees the holds before it in the batch. An
-- account's balance hash is read once per call and its 'held' written once (the batch's sum), so a hot
-- account pays one HMGET + one HINCRBY per batch and one HSETNX per request.
-- KEYS: per request, in order: its balance hash, its hold bucket, and for a key with a budget its counter.
-- ARGV: per request 6 values: 1 its number of keys (2, or 3 with a budget), 2 request id, 3 amount_micros,
--       4 the bucket's due time (ms), 5 the budget's limit ('' without), 6 the counter's expiry ('' = none).
-- Returns one reply per request, in order, each hold.lua's: {code, balance, held[, used]}, or an error reply
-- for a request that failed on its own (the others are not affected).
local accounts = {}
local order = {}
local out = {}
local now
local k = 1
-- One request's hold; `a` its first argument, `k` its first key.
local function hold(a, k)
  local bk, hk = KEYS[k], KEYS[k + 1]
  local ck
  if ARGV[a] == '3' then ck = KEYS[k + 2] end
  local id, amount = ARGV[a + 1], ARGV[a + 2]
  local amt, due = tonumber(amount), tonumber(ARGV[a + 3])
  local s = accounts[bk]
  if not s then
    local b = redis.call('HMGET', bk, 'balance', 'held', 'reaped')
    s = { bal = tonumber(b[1] or '0'), held = tonumber(b[2] or '0'), reaped = b[3] and tonumber(b[3]), add = 0 }
    accounts[bk] = s
    order[#order + 1] = bk
  end
  local r
  if s.reaped and due <= s.reaped then
    r = { -1, s.bal, s.held }
  elseif s.bal - s.held < amt then
    if redis.call('HEXISTS', hk, id) == 1 then r = { 2, s.bal, s.held } else r = { 0, s.bal, s.held } end
  else
    local stale
    local fresh
    if ck then
      -- hold.lua's budget check, on the counter as the holds before this one in the batch left it.
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      local c = redis.call('HGETALL', ck)
      fresh = #c == 0
      local used = 0
      for i = 1, #c, 2 do
        local f = c[i]
        if f == 's' then
          used = used + tonumber(c[i + 1])
        elseif tonumber(string.sub(f, 2)) > now then
          used = used + tonumber(c[i + 1])
        else
          stale = stale or {}
          stale[#stale + 1] = f
        end
      end
      if used + amt > tonumber(ARGV[a + 4]) then
        if redis.call('HEXISTS', hk, id) == 1 then r = { 2, s.bal, s.held } else r = { -2, s.bal, s.held, used } end
      end
    end
    if not r then
      if redis.call('HSETNX', hk, id, 'o' .. amount) == 0 then
        r = { 2, s.bal, s.held }
      else
        s.held = s.held + amt
        s.add = s.add + amt
        r = { 1, s.bal, s.held }
        if ck then
          redis.call('HINCRBY', ck, 'h' .. ARGV[a + 3], amount)
          if stale then redis.call('HDEL', ck, unpack(stale)) end
          if fresh and ARGV[a + 5] ~= '' then redis.call('PEXPIREAT', ck, ARGV[a + 5]) end
        end
      end
    end
  end
  return r
end
-- Each request in a protected call: an error fails that request alone, and the holds taken so far still
-- count in the account's 'held' below.
for a = 1, #ARGV, 6 do
  local ok, r = pcall(hold, a, k)
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
  if s.add ~= 0 then redis.call('HINCRBY', bk, 'held', string.format('%d', s.add)) end
end
return out
