-- placeholder until the twin of leaky_shaper.py lands
local function leaky_shaper(key, now, cost, p)
  error('leaky_shaper: no Lua twin yet')
end
