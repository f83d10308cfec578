-- The migration's last step (docs/shares.md "Migration"): a record of the layout that kept the snapshot
-- in Redis is rewritten to the compact one once its object is confirmed in the bucket, freeing the
-- snapshot's bytes. Atomic against a concurrent revoke (revoke-share.lua): the revocation is kept
-- whichever runs first. A record already compact (another instance migrated it) is left alone.
-- KEYS: 1 share hash. ARGV: 1 the snapshot's bytes (UTF-8), as confirmed in the bucket.
-- → 1 rewritten, 0 nothing to do.
if redis.call('HEXISTS', KEYS[1], 'snapshot') == 0 then return 0 end
local h = redis.call('HGETALL', KEYS[1])
local o = {}
for i = 1, #h, 2 do o[h[i]] = h[i + 1] end
redis.call('DEL', KEYS[1])
local args = {'a', o.account or '', 'c', o.created_at or '', 'b', ARGV[1]}
if o.files and o.files ~= '' and o.files ~= '[]' then
  table.insert(args, 'f'); table.insert(args, o.files)
end
if o.revoked_at and o.revoked_at ~= '' then
  table.insert(args, 'r'); table.insert(args, o.revoked_at)
end
redis.call('HSET', KEYS[1], unpack(args))
return 1
