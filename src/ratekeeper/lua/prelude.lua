-- ratekeeper: what every algorithm's Lua step shares. The store concatenates this file, each
-- algorithm's .lua (src/ratekeeper/algorithms/), and dispatch.lua into one script.
--
-- A step is `local function NAME(key, now, cost, p)` returning `decision, commit`:
--   decision = {allowed (1/0), limit, remaining, reset_after, retry_after, delay, granted}
--   commit   = nil, or a function that writes the new state (every write sets a TTL).
-- It performs the same float operations, in the same order, as the Python step beside it.

local EPSILON = 1e-9
local inf = math.huge
local floor = math.floor
local fmod = math.fmod

local function allow(limit, remaining, reset_after, granted, delay)
  return {1, limit, remaining, reset_after, 0, delay or 0, granted}
end

local function deny(limit, remaining, reset_after, retry_after)
  return {0, limit, remaining, reset_after, retry_after, 0, 0}
end

-- Milliseconds a key must live: until its state is fully available again, plus a second so
-- that a caller's own `now` running a little ahead of the server never loses state.
local function ttl_ms(seconds)
  if seconds ~= seconds or seconds == inf then return 86400000 end
  return floor(seconds * 1000) + 1000
end

-- States of fixed size are one string of numbers; they keep full float precision.
local function load_numbers(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  local numbers = {}
  for word in string.gmatch(raw, '%S+') do numbers[#numbers + 1] = tonumber(word) end
  return numbers
end

local function save_numbers(key, reset_after, numbers)
  local words = {}
  for i = 1, #numbers do words[i] = string.format('%.17g', numbers[i]) end
  redis.call('SET', key, table.concat(words, ' '), 'PX', ttl_ms(reset_after))
end
