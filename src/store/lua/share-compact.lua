-- The migration's last step (docs/shares.md "Migration"): a record of an earlier layout is rewritten to the
-- compact one once what it held is confirmed in the bucket: the snapshot (the layout that kept it in Redis)
-- and the file list (kept as `f` until the list became an object), freeing their bytes; the record keeps
-- only the number of files (`n`). Atomic against a concurrent revoke (revoke-share.lua): the revocation is
-- kept whichever runs first. A record already compact (another instance migrated it) is left alone.
-- KEYS: 1 share hash. ARGV: 1 the snapshot's bytes (UTF-8), as confirmed in the bucket; 2 the number of
-- files whose list is confirmed in the bucket (0: none).
-- → 1 rewritten, 0 nothing to do.
local h = redis.call('HGETALL', KEYS[1])
local o = {}
for i = 1, #h, 2 do o[h[i]] = h[i + 1] end
local n = tonumber(ARGV[2]) or 0
if o.snapshot then
  redis.call('DEL', KEYS[1])
  local args = {'a', o.account or '', 'c', o.created_at or '', 'b', ARGV[1]}
  if n > 0 then
    table.insert(args, 'n'); table.insert(args, tostring(n))
  end
  if o.revoked_at and o.revoked_at ~= '' then
    table.insert(args, 'r'); table.insert(args, o.revoked_at)
  end
  redis.call('HSET', KEYS[1], unpack(args))
  return 1
end
if o.a and o.f then
  -- Rewritten, not HDEL'd: a hash that once held a long value stays in Redis' larger encoding (~400 B for
  -- these few fields instead of ~150 B) until it is written anew. Its expiry, if any, is kept.
  local ttl = redis.call('PTTL', KEYS[1])
  local args = {}
  for k, v in pairs(o) do
    if k ~= 'f' then
      table.insert(args, k); table.insert(args, v)
    end
  end
  if n > 0 then
    table.insert(args, 'n'); table.insert(args, tostring(n))
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], unpack(args))
  if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
  return 1
end
return 0
