-- placeholder until the twin of leaky_bucket.py lands
local function leaky_bucket(key, now, cost, p)
  error('leaky_bucket: no Lua twin yet')
end
