-- Grant (or correct, when negative) credit; idempotent per idempotency key.
-- KEYS: 1 balance hash, 2 ledger stream, 3 idempotency hash (all {acct:<id>})
-- ARGV: 1 amount_micros (integer), 2 idempotency key ('' = none), 3 note ('' = none), 4 ts (ISO)
if ARGV[2] ~= '' then
  local prev = redis.call('HGET', KEYS[3], ARGV[2])
  if prev then
    local b = redis.call('HMGET', KEYS[1], 'balance', 'held')
    return {prev, 1, tonumber(b[1] or '0'), tonumber(b[2] or '0')}
  end
end
local bal = redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
local id
if ARGV[3] ~= '' then
  id = redis.call('XADD', KEYS[2], '*', 'kind', 'grant', 'amount_micros', ARGV[1], 'ts', ARGV[4], 'note', ARGV[3])
else
  id = redis.call('XADD', KEYS[2], '*', 'kind', 'grant', 'amount_micros', ARGV[1], 'ts', ARGV[4])
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], id) end
return {id, 0, bal, held}
