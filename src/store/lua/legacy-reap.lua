-- The reaper of the layout before docs/ledger.md (one field per open hold in {acct:<id>}:holds, indexed
-- one request at a time in tg:holds): releases one such hold if it has expired, with a hold_expired
-- ledger entry (amount 0, the hold recorded). Kept so holds taken before an upgrade are still reaped.
-- KEYS: 1 balance hash, 2 old-layout holds hash, 3 ledger stream (all {acct:<id>})
-- ARGV: 1 request id, 2 now_ms, 3 ts
-- Returns 1 reaped, 0 no such hold (settled already), -1 not expired yet.
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return 0 end
local amount, expires = string.match(h, '^(%d+):(%d+)$')
if tonumber(expires) > tonumber(ARGV[2]) then return -1 end
redis.call('HDEL', KEYS[2], ARGV[1])
-- `0 - x`, not `-x`: a 0 hold would reach HINCRBY as "-0", which it rejects.
redis.call('HINCRBY', KEYS[1], 'held', 0 - tonumber(amount))
redis.call('XADD', KEYS[3], '*', 'kind', 'hold_expired', 'amount_micros', 0, 'ts', ARGV[3],
  'request_id', ARGV[1], 'hold_micros', amount)
return 1
