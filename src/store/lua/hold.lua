-- Take a credit hold when balance - held >= amount; idempotent per (request id, expiry).
-- The hold is one field of its hold bucket, the account's hash of every request whose hold expires in
-- the same second (hold-bucket.ts): 'o<amount>' while open. That field is also the request's
-- idempotency record until the reaper empties the bucket (docs/ledger.md), so no key is made per request.
-- KEYS: 1 balance hash, 2 hold bucket (both {acct:<id>}); for a key with a budget also 3 its budget
--       counter of the period (docs/keys.md): 's' settled spend, 'h<due>' open holds per bucket due time
-- ARGV: 1 request id, 2 amount_micros, 3 the bucket's due time (ms); with KEYS[3]: 4 the budget's limit,
--       5 the counter's expiry (unix ms, '' = none)
-- Returns {code, balance, held}: 1 taken, 2 already there (a replay: open, settled or reaped),
-- 0 refused (not enough credit), -1 refused as stale (its bucket was reaped already: only a replay
-- that reached Redis after its hold expired can be that late), -2 refused by the key's budget (then a
-- 4th element: the period's spend plus open holds).
local b = redis.call('HMGET', KEYS[1], 'balance', 'held', 'reaped')
local bal = tonumber(b[1] or '0')
local held = tonumber(b[2] or '0')
if b[3] and tonumber(ARGV[3]) <= tonumber(b[3]) then return {-1, bal, held} end
if bal - held < tonumber(ARGV[2]) then
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {2, bal, held} end
  return {0, bal, held}
end
local stale
local fresh
if KEYS[3] then
  -- Holds of buckets already due were released by the reaper: they no longer count, and go.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local c = redis.call('HGETALL', KEYS[3])
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
  if used + tonumber(ARGV[2]) > tonumber(ARGV[4]) then
    if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {2, bal, held} end
    return {-2, bal, held, used}
  end
end
if redis.call('HSETNX', KEYS[2], ARGV[1], 'o' .. ARGV[2]) == 0 then return {2, bal, held} end
held = redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
if KEYS[3] then
  redis.call('HINCRBY', KEYS[3], 'h' .. ARGV[3], ARGV[2])
  if stale then redis.call('HDEL', KEYS[3], unpack(stale)) end
  -- The expiry is the period's: set when the counter is made (a settle sets it again on a counter's first spend).
  if fresh and ARGV[5] ~= '' then redis.call('PEXPIREAT', KEYS[3], ARGV[5]) end
end
return {1, bal, held}
