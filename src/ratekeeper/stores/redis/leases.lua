-- ratekeeper: the lease script's entry point (a leased limit's exchange, the twin of
-- ratekeeper.algorithms.leases.exchange). It is built for one algorithm, as a single-hit script
-- is: the header names it in NEEDS, with REFUNDS and HOLDS set, and the lines before this file
-- bind its step, refund and hold (nil for an algorithm that counts per window) to STEP, REFUND
-- and HOLD. KEYS[1] is the state key, KEYS[2] the hash of the slices held (holder -> units and
-- expiry, two packed doubles), written for an algorithm with a hold only. ARGV is
--   [1] now in seconds ('' takes the server's TIME), [2] the units wanted, [3] the holder,
--   [4] the slices' lifetime in seconds, [5] the units given back, [6] the `now` the slice
--   they come from was taken at ('' for none), [7] the fewest units worth taking (the cost of
--   the hit that asks), then the limit's 10 fields in the batch script's order, at base 7.
-- Reply: the decision as one packed string (DECISION, in the prelude; its granted is the units
-- of the new slice), then the `now` it was taken at, a packed double.

for _, count in ipairs({ARGV[2], ARGV[5], ARGV[7]}) do
  if #count > 16 or not match(count, '^%d+$') then
    return redis.error_reply('ratekeeper: invalid cost ' .. string.sub(count, 1, 40))
  end
end
local ttl = tonumber(ARGV[4])
if not ttl or ttl ~= ttl or ttl <= 0 or ttl > 86400 then
  return redis.error_reply('ratekeeper: invalid lease lifetime ' .. string.sub(ARGV[4], 1, 40))
end
local holder = ARGV[3]
if holder == '' or #holder > 200 then
  return redis.error_reply('ratekeeper: invalid lease holder')
end
if ARGV[7 + PARTIAL] == '1' or ARGV[7 + DEBT] == '1' then
  return redis.error_reply('ratekeeper: a partial limit or one with debt does not lease')
end
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
end
local want, returned, need = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[7])
if need < 1 then need = 1 end
local taken_at = tonumber(ARGV[6])
local state, slices = KEYS[1], KEYS[2]

local others = 0
if HOLD then
  local fields = redis.call('HGETALL', slices)
  if #fields > 0 then
    local everything = 0
    for i = 1, #fields, 2 do
      local units, expires = unpack_state('<dd', fields[i + 1])
      everything = everything + units
      if fields[i] ~= holder and expires > now then
        others = others + units
      else
        redis.call('HDEL', slices, fields[i])
      end
    end
    HOLD(state, now, everything, 7)
  end
end
if returned > 0 and taken_at then
  REFUND(state, taken_at, returned, 7)
  if HOLD then HOLD(state, now, others, 7) end
end
local allowed, limit, remaining, reset_after, retry_after, delay, granted = STEP(state, now, 0, 7)
local units = 0
if want > 0 then
  if remaining >= need then
    if 2 * want <= remaining then
      units = want
    else
      units = floor((remaining + 1) / 2)
      if units > want then units = want end
      if units < need then units = need end
    end
    allowed, limit, remaining, reset_after, retry_after, delay, granted =
      STEP(state, now, units, 7)
    if allowed == 0 and units > need then -- float rounding at the very top
      units = units - 1
      allowed, limit, remaining, reset_after, retry_after, delay, granted =
        STEP(state, now, units, 7)
    end
    if allowed == 0 then units = 0 end
  end
  if units == 0 then
    allowed, limit, remaining, reset_after, retry_after, delay, granted =
      STEP(state, now, need, 7)
  elseif HOLD then
    redis.call('HSET', slices, holder, pack('<dd', units, now + ttl))
    local lifetime = floor(ttl * 1000) + 1000
    if redis.call('PTTL', slices) < lifetime then redis.call('PEXPIRE', slices, lifetime) end
  end
end
return pack(DECISION, allowed, limit, remaining, reset_after, retry_after, delay, granted, 0)
  .. pack('<d', now)
