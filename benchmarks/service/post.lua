-- wrk: POST the JSON body held in the file $BENCH_BODY_FILE on every request
-- (benchmarks/service/load.py writes the file and sets the variable). With $BENCH_DELAY_MS, each
-- connection pauses before each request for a random time of that mean (exponential), so that
-- the connections together send about connections * 1000 / BENCH_DELAY_MS requests a second,
-- at random moments, as independent clients would.
local path = assert(os.getenv("BENCH_BODY_FILE"), "BENCH_BODY_FILE is not set")
local file = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
wrk.headers["Content-Type"] = "application/json"
file:close()

local mean = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
if mean > 0 then
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16))
  function delay()
    -- wrk waits whole milliseconds (it truncates): + 0.5 rounds the draw instead
    return -mean * math.log(1 - math.random()) + 0.5
  end
end
