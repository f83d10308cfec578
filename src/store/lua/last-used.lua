-- A key's last use (SPEC §10 last_used_at), written only while its account still holds the key: a flush
-- that lands after the key was deleted must not put it back in the hash, which has no expiry and is read
-- whole by every key list (a member who creates, uses and deletes keys grew it without bound).
-- KEYS: 1 the account's key set, 2 its last-use hash (both in the account's slot). ARGV: 1 key id,
-- 2 ISO minute. Returns 1 when written, 0 for a key the account no longer holds.
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
