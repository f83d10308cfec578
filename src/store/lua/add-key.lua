-- Counts a new key into its account's key set under the account's cap (SPEC §13:
-- limits.max_keys_per_account). The check and the SADD are one script in the account's slot, so
-- concurrent creates cannot pass the cap. The set holds every key the account has, disabled or expired
-- ones too (they count); DELETE /admin/keys/{id} removes a key from it.
-- KEYS: 1 the account's key set. ARGV: 1 key id, 2 cap (0: none). → 1 added (or already there), 0 at the cap.
local max = tonumber(ARGV[2])
if max > 0 and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 and redis.call('SCARD', KEYS[1]) >= max then
  return 0
end
redis.call('SADD', KEYS[1], ARGV[1])
return 1
