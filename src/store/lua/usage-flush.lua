-- One account's usage aggregates of one UTC day from one flush (SPEC §10), applied at most once: the
-- day's hash keeps, per flushing process, the sequence number of the last flush it applied (field
-- `~flush:<process>`, which no usage field can be: those are `<key id>|<model>|<counter>`), so a retried
-- flush that already landed (its reply lost to a restart or a timeout) changes nothing.
-- KEYS: 1 the day's hash. ARGV: 1 process id ('' = no check), 2 flush sequence number, 3 EXPIREAT
-- (unix seconds), then field, increment pairs. Returns 1 when applied, 0 when it had been already.
if ARGV[1] ~= '' then
  local mark = '~flush:' .. ARGV[1]
  local last = tonumber(redis.call('HGET', KEYS[1], mark) or '0')
  if last >= tonumber(ARGV[2]) then return 0 end
  redis.call('HSET', KEYS[1], mark, ARGV[2])
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return 1
