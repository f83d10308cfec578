-- Drops an old key's claim if it is still exactly the one a roll met (compare and delete), so a roll may
-- take it again: a pending claim its roll never confirmed, or a confirmed one whose new key was deleted
-- without its cleanup (redis-store.ts createKey says when). Also takes the new key's id out of the
-- account's key set (it was counted by add-key.lua and is not stored).
-- KEYS: 1 the account's rolled keys, 2 the account's key set.
-- ARGV: 1 the old key's id, 2 the claim as it was met ('~' + id, or id), 3 the new key's id.
-- → 1 dropped, 0 the claim changed meanwhile (confirmed, or taken by another roll): nothing done.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[3])
return 1
