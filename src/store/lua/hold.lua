-- Take a credit hold when balance - held >= amount; idempotent per request id.
-- KEYS: 1 balance hash, 2 holds hash, 3 settled marker of this request (all {acct:<id>}),
--       4 (single node only) the global hold index, indexed here so the hold is one command
-- ARGV: 1 request id, 2 amount_micros, 3 expires_at_ms, 4 index member
local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
local bal = tonumber(b[1] or '0')
local held = tonumber(b[2] or '0')
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
  return {1, bal, held}
end
local amount = tonumber(ARGV[2])
if bal - held < amount then return {0, bal, held} end
held = redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
if KEYS[4] then redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4]) end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
return {1, bal, held}
