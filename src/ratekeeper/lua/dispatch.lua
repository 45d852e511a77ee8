-- ratekeeper: the entry point. KEYS holds one state key per hit; ARGV is
--   [1] now in seconds ('' takes the server's TIME), [2] all_or_nothing ('1' or '0'),
--   then 10 fields per hit: algorithm, cost, amount, period, capacity, rate, interval,
--   bucket, unit (calendar unit or ''), partial ('1' or '0').
-- Hits run in order. With all_or_nothing a first pass only looks; nothing is written unless
-- every hit is allowed. Reply: {now, decision, decision, ...}, floats as %.17g strings.

local STEPS = {
  fixed_window = fixed_window, sliding_log = sliding_log, sliding_counter = sliding_counter,
  bucketed_window = bucketed_window, token_bucket = token_bucket, leaky_bucket = leaky_bucket,
  leaky_shaper = leaky_shaper, gcra = gcra, concurrency = concurrency,
}
local FIELDS = 10

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
end

local hits = {}
for i = 1, #KEYS do
  local base = 2 + (i - 1) * FIELDS
  hits[i] = {
    step = STEPS[ARGV[base + 1]],
    cost = tonumber(ARGV[base + 2]),
    p = {
      amount = tonumber(ARGV[base + 3]), period = tonumber(ARGV[base + 4]),
      capacity = tonumber(ARGV[base + 5]), rate = tonumber(ARGV[base + 6]),
      interval = tonumber(ARGV[base + 7]), bucket = tonumber(ARGV[base + 8]),
      unit = ARGV[base + 9], partial = ARGV[base + 10] == '1',
    },
  }
end

local decisions = {}
local refused = false
if ARGV[2] == '1' then
  for i = 1, #KEYS do
    local d = hits[i].step(KEYS[i], now, hits[i].cost, hits[i].p)
    decisions[i] = d
    if d[1] == 0 then refused = true end
  end
  if refused then
    for i = 1, #KEYS do
      if decisions[i][1] == 1 then decisions[i][7] = 0 end
    end
  end
end
if not refused then
  for i = 1, #KEYS do
    local d, commit = hits[i].step(KEYS[i], now, hits[i].cost, hits[i].p)
    if commit then commit() end
    decisions[i] = d
  end
end

local reply = {string.format('%.17g', now)}
for i = 1, #KEYS do
  local d = decisions[i]
  reply[i + 1] = {
    d[1], d[2], d[3], string.format('%.17g', d[4]), string.format('%.17g', d[5]),
    string.format('%.17g', d[6]), d[7],
  }
end
return reply
