-- Take a credit hold when balance - held >= amount; idempotent per (request id, expiry).
-- The hold is one field of its hold bucket, the account's hash of every request whose hold expires in
-- the same second (hold-bucket.ts): 'o<amount>' while open. That field is also the request's
-- idempotency record until the reaper empties the bucket (docs/ledger.md), so no key is made per request.
-- KEYS: 1 balance hash, 2 hold bucket (both {acct:<id>})
-- ARGV: 1 request id, 2 amount_micros, 3 the bucket's due time (ms)
-- Returns {code, balance, held}: 1 taken, 2 already there (a replay: open, settled or reaped),
-- 0 refused (not enough credit), -1 refused as stale (its bucket was reaped already: only a replay
-- that reached Redis after its hold expired can be that late).
local b = redis.call('HMGET', KEYS[1], 'balance', 'held', 'reaped')
local bal = tonumber(b[1] or '0')
local held = tonumber(b[2] or '0')
if b[3] and tonumber(ARGV[3]) <= tonumber(b[3]) then return {-1, bal, held} end
if bal - held < tonumber(ARGV[2]) then
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {2, bal, held} end
  return {0, bal, held}
end
if redis.call('HSETNX', KEYS[2], ARGV[1], 'o' .. ARGV[2]) == 0 then return {2, bal, held} end
held = redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
return {1, bal, held}
