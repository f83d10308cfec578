-- Confirms a roll's claim once its new key is stored (record and id index written): the old key's claim
-- goes from pending ('~' + new id, lua/add-key.lua) to the new id, unless a later roll dropped it meanwhile
-- (drop-claim.lua: the new key was taken for a failed roll). Whichever of the two runs first in the
-- account's slot wins, so a key never has two live successors.
-- KEYS: 1 the account's rolled keys.
-- ARGV: 1 the old key's id, 2 the new key's id.
-- → 1 confirmed (or already), 0 the claim is gone or names another key: the new key must be undone.
local claim = redis.call('HGET', KEYS[1], ARGV[1])
if claim == ARGV[2] then
  return 1
end
if claim == '~' .. ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
