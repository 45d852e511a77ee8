-- placeholder until the twin of sliding_counter.py lands
local function sliding_counter(key, now, cost, p)
  error('sliding_counter: no Lua twin yet')
end
