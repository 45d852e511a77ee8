-- ratekeeper: the refund script's entry point. A Redis Cluster batch with all_or_nothing over
-- several slots runs the batch script once per slot; when one slot refuses, the store sends
-- this script to every slot that admitted all its hits, to take them back. KEYS and ARGV are
-- laid out as for dispatch.lua, with three differences: ARGV[1] is the `now` that slot's batch
-- script ran at (as its reply reported it), never ''; ARGV[2] is not read; and each hit's cost
-- is the units it was granted. Each hit is refunded by its algorithm's NAME_refund, the last
-- hit first, so that a key hit twice is taken back in the reverse order it was charged.
-- Reply: the number of hits refunded.

local now = tonumber(ARGV[1])
if not now then return redis.error_reply('ratekeeper: invalid now ' .. tostring(ARGV[1])) end
local count = #KEYS
local hits = 3 + tonumber(ARGV[3]) * LIMIT_FIELDS
for i = 1, count do
  local cost = ARGV[hits + i * 2] or ''
  if #cost > 16 or not match(cost, '^%d+$') then
    return redis.error_reply('ratekeeper: invalid cost ' .. string.sub(cost, 1, 40))
  end
end

local refunds = {
  --@refunds: `<algorithm> = <algorithm>_refund,`, one line per algorithm
}
for i = count, 1, -1 do
  local h = hits + (i - 1) * 2
  local a = 3 + (tonumber(ARGV[h + 1]) - 1) * LIMIT_FIELDS
  local refund = refunds[ARGV[a + 1]]
  if not refund then
    return redis.error_reply('ratekeeper: unknown algorithm ' .. tostring(ARGV[a + 1]))
  end
  refund(KEYS[i], now, tonumber(ARGV[h + 2]), a)
end
return count
