-- placeholder until the twin of sliding_log.py lands
local function sliding_log(key, now, cost, p)
  error('sliding_log: no Lua twin yet')
end
