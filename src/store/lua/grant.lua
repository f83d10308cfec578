-- Grant (or correct, when negative) credit; idempotent per idempotency key.
-- KEYS: 1 balance hash, 2 ledger stream, 3 idempotency hash (all {acct:<id>})
-- ARGV: 1 amount_micros (integer), 2 idempotency key ('' = none), 3 note ('' = none), 4 ts (ISO),
--       5 the largest balance either sign (MAX_BALANCE_MICROS, 9e15)
-- Returns {entry id, replayed (1) / credited (0) / refused out of range (2), balance, held}.
if ARGV[2] ~= '' then
  local prev = redis.call('HGET', KEYS[3], ARGV[2])
  if prev then
    local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
    return {prev, 1, tonumber(b[1] or '0'), tonumber(b[2] or '0')}
  end
end
local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
local held = tonumber(b[2] or '0')
-- Both terms are far below 2^53 in magnitude, so the sum is exact as a double.
local after = tonumber(b[1] or '0') + tonumber(ARGV[1])
local max = tonumber(ARGV[5])
if after > max or after < -max then return {'', 2, tonumber(b[1] or '0'), held} end
local bal = redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])
local id
if ARGV[3] ~= '' then
  id = redis.call('XADD', KEYS[2], '*', 'kind', 'grant', 'amount_micros', ARGV[1], 'ts', ARGV[4], 'note', ARGV[3])
else
  id = redis.call('XADD', KEYS[2], '*', 'kind', 'grant', 'amount_micros', ARGV[1], 'ts', ARGV[4])
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], id) end
return {id, 0, bal, held}
