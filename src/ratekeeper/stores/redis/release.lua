-- ratekeeper: the release script's entry point (RedisStore.release): the prelude,
-- concurrency.lua and this file. KEYS[1] is the concurrency limit's state key; ARGV is
--   [1] now in seconds ('' takes the server's TIME), [2] the number of slots to release, then
--   the limit's 10 fields as in single.lua (base 2).
-- The slots must be a positive integer of at most 16 digits, else the script writes nothing
-- and replies the error 'ratekeeper: invalid slots <text>'. The release is the concurrency
-- step with a cost of -slots: up to that many leases go, the earliest-expiring first.
-- Reply: that decision's 7 fields, with granted the number of slots released (not negative).

local slots = ARGV[2]
if #slots > 16 or not match(slots, '^%d+$') or tonumber(slots) == 0 then
  return redis.error_reply('ratekeeper: invalid slots ' .. string.sub(slots, 1, 40))
end
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
end
local allowed, limit, remaining, reset_after, retry_after, delay, granted =
  concurrency(KEYS[1], now, -tonumber(slots), 2)
return {allowed, limit, remaining, num(reset_after), num(retry_after), num(delay), -granted}
