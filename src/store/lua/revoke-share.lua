-- Mark a share revoked once; returns the record's fields, or false when the share does not exist.
-- KEYS: 1 share hash. ARGV: 1 ts
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if (redis.call('HGET', KEYS[1], 'revoked_at') or '') == '' then redis.call('HSET', KEYS[1], 'revoked_at', ARGV[1]) end
return redis.call('HGETALL', KEYS[1])
