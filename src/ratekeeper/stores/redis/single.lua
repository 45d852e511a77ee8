-- ratekeeper: a single-hit script's entry point (apply). It is built for one algorithm: the
-- header names it in NEEDS, and the line before this file binds its step to STEP. No NEEDS
-- table is read from ARGV, no dispatch, no snapshot. KEYS[1] is the state key; ARGV is
--   [1] now in seconds ('' takes the server's TIME), [2] the cost, then the limit's 10 fields
--   in the batch script's order (algorithm, amount, period, capacity, rate, interval, bucket,
--   unit, partial, debt), so that the step reads them from the same offsets, at base 2.
-- Reply: the decision as one packed string (DECISION, in the prelude). A cost that is not a
-- non-negative integer of at most 16 digits is refused before anything is written.

local cost = ARGV[2]
if #cost > 16 or not match(cost, '^%d+$') then
  return redis.error_reply('ratekeeper: invalid cost ' .. string.sub(cost, 1, 40))
end
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
end
local allowed, limit, remaining, reset_after, retry_after, delay, granted =
  STEP(KEYS[1], now, tonumber(cost), 2)
return pack(DECISION, allowed, limit, remaining, reset_after, retry_after, delay, granted, 0)
