-- wrk: POST the JSON body held in the file $BENCH_BODY_FILE on every request
-- (benchmarks/service/load.py writes the file and sets the variable).
local path = assert(os.getenv("BENCH_BODY_FILE"), "BENCH_BODY_FILE is not set")
local file = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
wrk.headers["Content-Type"] = "application/json"
file:close()
