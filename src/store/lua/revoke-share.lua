-- Mark a share revoked once; returns the record's fields, or false when the share does not exist.
-- Records of both layouts: compact (`a`, `c`, `b`, `f`, `r`) and the one before it (`slug`, `snapshot`,
-- `revoked_at`, …) that the migration rewrites (share-compact.lua).
-- KEYS: 1 share hash. ARGV: 1 ts
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local field = 'r'
if redis.call('HEXISTS', KEYS[1], 'slug') == 1 then field = 'revoked_at' end
if (redis.call('HGET', KEYS[1], field) or '') == '' then redis.call('HSET', KEYS[1], field, ARGV[1]) end
return redis.call('HGETALL', KEYS[1])
