-- placeholder until the twin of token_bucket.py lands
local function token_bucket(key, now, cost, p)
  error('token_bucket: no Lua twin yet')
end
