-- Settle a request: debit the actual cost, release its hold, append one debit entry. Idempotent per
-- request id through the settled marker, kept ARGV[9] seconds (the hold TTL + the settle retry window).
-- A hold already reaped is simply not released twice; the debit is still recorded, so nothing the
-- upstream produced goes unbilled.
-- KEYS: 1 balance hash, 2 holds hash, 3 ledger stream, 4 settled marker (all {acct:<id>}),
--       5 (single node only) the global hold index
-- ARGV: 1 request id, 2 cost_micros, 3 ts, 4 key id, 5 model, 6 prompt tokens, 7 completion tokens,
--       8 usage source, 9 marker ttl seconds, 10 index member
local prev = redis.call('GET', KEYS[4])
if prev then
  local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
  return {prev, 1, tonumber(b[1] or '0'), tonumber(b[2] or '0')}
end
-- `0 - x`, never `-x`: Lua's -0 reaches Redis as the string "-0", which HINCRBY rejects ("not an
-- integer"), so a request costing 0 (or holding 0) could never settle.
local cost = tonumber(ARGV[2])
local holdAmount = 0
local held
local h = redis.call('HGET', KEYS[2], ARGV[1])
if h then
  holdAmount = tonumber(string.match(h, '^(%d+)'))
  redis.call('HDEL', KEYS[2], ARGV[1])
  held = redis.call('HINCRBY', KEYS[1], 'held', 0 - holdAmount)
end
local bal = redis.call('HINCRBY', KEYS[1], 'balance', 0 - cost)
-- Only a settle without its hold (reaped, or never taken) reads `held`: the common path already has it.
if not held then held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') end
local id = redis.call('XADD', KEYS[3], '*', 'kind', 'debit', 'amount_micros', 0 - cost, 'ts', ARGV[3],
  'request_id', ARGV[1], 'key_id', ARGV[4], 'model', ARGV[5], 'prompt_tokens', ARGV[6],
  'completion_tokens', ARGV[7], 'usage_source', ARGV[8], 'hold_micros', holdAmount)
redis.call('SET', KEYS[4], id, 'EX', ARGV[9])
if KEYS[5] then redis.call('ZREM', KEYS[5], ARGV[10]) end
return {id, 0, bal, held}
