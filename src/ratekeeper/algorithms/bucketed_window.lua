-- placeholder until the twin of bucketed_window.py lands
local function bucketed_window(key, now, cost, p)
  error('bucketed_window: no Lua twin yet')
end
