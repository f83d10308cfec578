-- Drops a deleted key's fields from its account's rolled keys (lua/add-key.lua): its own claim as an old
-- key, and — when it was a roll's new key — its old key's claim, only while that claim still names it (a
-- compare and delete in one step: a later roll of the old key, once the claim was freed, is never undone).
-- KEYS: 1 the account's rolled keys (hash: old key id → new key id, '~' + id while pending).
-- ARGV: 1 the deleted key's id, 2 the id of the key it was rolled from ('' for none).
-- → how many fields were removed.
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then
  local claim = redis.call('HGET', KEYS[1], ARGV[2])
  if claim == ARGV[1] or claim == '~' .. ARGV[1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[2])
  end
end
return n
