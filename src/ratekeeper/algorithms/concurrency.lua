-- placeholder until the twin of concurrency.py lands
local function concurrency(key, now, cost, p)
  error('concurrency: no Lua twin yet')
end
