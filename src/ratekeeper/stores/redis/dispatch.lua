-- ratekeeper: the batch script's entry point (apply_many). KEYS holds one state key per hit;
-- ARGV is
--   [1] now in seconds ('' takes the server's TIME), [2] all_or_nothing: '0' no, '1' yes,
--   '2' yes, and the reply ends with the `now` the script ran at (see below), '3' no, and
--   the reply ends with its `now`,
--   [3] L, the number of distinct limits in the batch, then L blocks of 10 fields:
--   algorithm, amount, period, capacity, rate, interval, bucket, unit (calendar unit or ''),
--   partial ('1' or '0'), debt ('1' or '0'); then 2 fields per hit: the index of its limit
--   (1..L) and its cost.
-- Every cost must be a non-negative integer of at most 16 digits: else the script writes
-- nothing and replies the error 'ratekeeper: invalid cost <text>'.
-- Hits run in order, each seeing the state the earlier ones left. With all_or_nothing nothing
-- is kept unless every hit is allowed: the keys are snapshotted (DUMP) first and restored if
-- one hit is refused; the allowed hits then report the state they would have left, with
-- granted 0 (as the memory store does). Hits under a limit with debt count whatever the
-- others do: after the restore they run again, in order, and report what they counted. (A
-- batch whose limits all have debt has nothing to restore, and takes no snapshot.) Reply: one string, each decision packed in turn
-- (DECISION, in the prelude); with ARGV[2] '2' or '3', then `now` as one more little-endian
-- double, which a Redis Cluster batch spanning slots needs to refund this slot's hits
-- (refund.lua) when another slot refused, and a caller to refund a hit later (admit).

local count = #KEYS
local hits = 3 + tonumber(ARGV[3]) * LIMIT_FIELDS
for i = 1, count do
  local cost = ARGV[hits + i * 2] or ''
  if #cost > 16 or not match(cost, '^%d+$') then
    return redis.error_reply('ratekeeper: invalid cost ' .. string.sub(cost, 1, 40))
  end
end

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
end

local mode = ARGV[2]
local owing = 0 -- the limits with debt
for j = 1, tonumber(ARGV[3]) do
  if ARGV[3 + j * LIMIT_FIELDS] == '1' then owing = owing + 1 end
end
local saved = nil
if (mode == '1' or mode == '2') and count > 1 and owing < tonumber(ARGV[3]) then
  -- (A single hit needs no snapshot: a refused hit writes nothing.)
  saved = {}
  for i = 1, count do
    local key = KEYS[i]
    if saved[key] == nil then
      local dump = redis.call('DUMP', key)
      if dump then saved[key] = {dump, redis.call('PTTL', key)} else saved[key] = false end
    end
  end
end

local reply = {}
local refused = false
-- Run hit i, its decision into the reply; `only_debt` skips the hits without debt.
local function run(i, only_debt)
  local h = hits + (i - 1) * 2
  local a = 3 + (tonumber(ARGV[h + 1]) - 1) * LIMIT_FIELDS
  if only_debt and ARGV[a + DEBT] ~= '1' then return end
  local name = ARGV[a + 1]
  local step
  --@steps: `if name == '<algorithm>' then step = <algorithm>`, one branch per algorithm
  else return redis.error_reply('ratekeeper: unknown algorithm ' .. tostring(name)) end
  local allowed, limit, remaining, reset_after, retry_after, delay, granted =
    step(KEYS[i], now, tonumber(ARGV[h + 2]), a)
  if allowed == 0 then refused = true end
  local r = (i - 1) * 7
  reply[r + 1] = allowed
  reply[r + 2] = limit
  reply[r + 3] = remaining
  reply[r + 4] = reset_after
  reply[r + 5] = retry_after
  reply[r + 6] = delay
  reply[r + 7] = granted
end
for i = 1, count do
  local failed = run(i, false)
  if failed then return failed end
end

if saved and refused then
  for key, snapshot in pairs(saved) do
    if snapshot then
      local ttl = snapshot[2]
      redis.call('RESTORE', key, ttl > 0 and ttl or 0, snapshot[1], 'REPLACE')
    else
      redis.call('DEL', key)
    end
  end
  for r = 0, (count - 1) * 7, 7 do
    if reply[r + 1] == 1 then reply[r + 7] = 0 end
  end
  if owing > 0 then
    for i = 1, count do run(i, true) end
  end
end
local packed = {}
for i = 1, count do
  local r = (i - 1) * 7
  packed[i] = pack(DECISION, reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4],
    reply[r + 5], reply[r + 6], reply[r + 7], 0)
end
if mode == '2' or mode == '3' then packed[count + 1] = pack('<d', now) end
return concat(packed)
