-- The ledger export's state in an account's slot (SPEC §10, docs/ledger-export.md): its lease, its
-- cursor (the last entry S3 acknowledged) and the trim behind it. Never touches balance, holds or settles.
-- KEYS: 1 lease (string), 2 export state (hash: cursor, archived_before), 3 ledger stream (all {acct:<id>})
-- ARGV: 1 op, then per op:
--   'lease'   2 token, 3 ttl ms            → 1 taken (or renewed: already ours), 0 held by another
--   'release' 2 token                      → 1 released, 0 not ours
--   'commit'  2 token, 3 from ('' = none), 4 to (an entry id: `<ms>-<seq>`, or `<ms>-<seq>.<k>` inside a packed entry) → 1 moved, 0 lease lost or cursor moved meanwhile (fenced)
--   'trim'    2 before id (<ms>-<seq>)     → entries removed
local op = ARGV[1]
if op == 'lease' then
  local cur = redis.call('GET', KEYS[1])
  if cur and cur ~= ARGV[2] then return 0 end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if op == 'release' then
  if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
end
if op == 'commit' then
  if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
  if (redis.call('HGET', KEYS[2], 'cursor') or '') ~= ARGV[3] then return 0 end
  redis.call('HSET', KEYS[2], 'cursor', ARGV[4])
  return 1
end
if op == 'trim' then
  local cursor = redis.call('HGET', KEYS[2], 'cursor')
  if not cursor then return 0 end
  -- Trim below min(before, the entry after the cursor): nothing past the cursor (unexported) goes. A
  -- cursor inside a packed entry (`<id>.<k>`, docs/ledger.md "Packed passes") keeps that entry: its
  -- debits after the k-th are not exported yet.
  local cms, cseq, csub = string.match(cursor, '^(%d+)-(%d+)(.*)$')
  local bms, bseq = string.match(ARGV[2], '^(%d+)-(%d+)$')
  cms, cseq, bms, bseq = tonumber(cms), tonumber(cseq), tonumber(bms), tonumber(bseq)
  if csub == '' then cseq = cseq + 1 end
  local minid
  if bms < cms or (bms == cms and bseq < cseq) then
    minid = string.format('%d-%d', bms, bseq)
  else
    minid = string.format('%d-%d', cms, cseq)
  end
  local n = redis.call('XTRIM', KEYS[3], 'MINID', minid)
  if n > 0 then redis.call('HSET', KEYS[2], 'archived_before', minid) end
  return n
end
return redis.error_reply('unknown op ' .. tostring(op))
