-- wrk: the soak run's mixed traffic, POST /v1/check with one descriptor per request.
-- Of every 100 requests, 90 name a user (SOAK_KEYS distinct users, in turn, each far under
-- its limit), 5 one of SOAK_HOT hot API keys (over their limit), and 5 one of 1,000 client
-- addresses. SOAK_DELAY_MS is each connection's pause between requests (0: none), which sets
-- the rate. done() prints one line of counts by outcome, read by benchmarks/soak/load.py.
local keys = tonumber(os.getenv("SOAK_KEYS") or "1000000")
local hot = tonumber(os.getenv("SOAK_HOT") or "10")
local pause = tonumber(os.getenv("SOAK_DELAY_MS") or "0")
local offset = tonumber(os.getenv("SOAK_OFFSET") or "0")
local threads = {}
local n = 0
counts = { allowed = 0, limited = 0, degraded = 0, other = 0 } -- global: done() reads each thread's

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  n = id * 7919
  counts = { allowed = 0, limited = 0, degraded = 0, other = 0 }
  wrk.method = "POST"
  wrk.path = "/v1/check"
  wrk.headers["Content-Type"] = "application/json"
end

local function body(key, value)
  return '{"domain":"soak","descriptors":[{"entries":[{"key":"' .. key ..
    '","value":"' .. value .. '"}]}]}'
end

function request()
  n = n + 1
  local slot = n % 100

  if slot < 90 then
    return wrk.format(nil, nil, nil, body("user", "u" .. ((offset + n) % keys)))
  elseif slot < 95 then
    return wrk.format(nil, nil, nil, body("api_key", "hot" .. (n % hot)))
  end
  return wrk.format(nil, nil, nil, body("remote_address", "10.0." .. (n % 4) .. "." .. (n % 250)))
end

if pause > 0 then
  function delay()
    return pause
  end
end

function response(status, headers, body)
  if headers["X-RateLimit-Degraded"] or headers["x-ratelimit-degraded"] then
    counts.degraded = counts.degraded + 1
  elseif status == 200 then
    counts.allowed = counts.allowed + 1
  elseif status == 429 then
    counts.limited = counts.limited + 1
  else
    counts.other = counts.other + 1
  end
end

function done(summary, latency, requests)
  local total = { allowed = 0, limited = 0, degraded = 0, other = 0 }
  for _, thread in ipairs(threads) do
    local c = thread:get("counts")
    for name, value in pairs(c) do
      total[name] = total[name] + value
    end
  end
  io.write(string.format("soak allowed=%d limited=%d degraded=%d other=%d p50=%d p99=%d\n",
    total.allowed, total.limited, total.degraded, total.other,
    latency:percentile(50), latency:percentile(99)))
end
