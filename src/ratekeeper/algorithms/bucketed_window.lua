-- Bucketed sliding window: the twin of bucketed_window.py. State: "start count start count ...",
-- the non-empty buckets in the window, oldest first (their total is summed on load).
local function bucketed_window(key, now, cost, a)
  local amount = tonumber(ARGV[a + AMOUNT])
  local width = tonumber(ARGV[a + BUCKET])
  -- The window's length in whole buckets (a partial last bucket counts as a whole one).
  local span = floor(tonumber(ARGV[a + PERIOD]) / width + 0.999999999) * width
  local current = now - pymod(now, width)
  -- Bucket starts lie on a grid of `width`; half a bucket of slack absorbs float error.
  local half = 0.5 * width
  local cutoff = current - span + half -- a bucket is in the window while its start is above this
  local starts, counts, n, total = {}, {}, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    -- The starts are sorted, so dropping those at or before the cutoff drops a prefix, as the
    -- Python step does.
    local is_start, at, keep = true, 0, false
    for word in string.gmatch(raw, '%S+') do
      if is_start then
        at = tonumber(word)
        keep = n > 0 or at > cutoff
      elseif keep then
        local units = tonumber(word)
        n = n + 1
        starts[n] = at
        counts[n] = units
        total = total + units
      end
      is_start = not is_start
    end
  end
  if total + cost <= amount then
    if cost ~= 0 then
      if n > 0 and starts[n] > current - half then
        -- The current bucket, or a later one if the clock went backwards.
        counts[n] = counts[n] + cost
      else
        n = n + 1
        starts[n] = current
        counts[n] = cost
      end
      total = total + cost
    end
    local reset_after = 0.0
    if n > 0 then reset_after = starts[n] + span - now end
    if cost ~= 0 then
      local words = {}
      for i = 1, n do words[i] = format('%.17g %d', starts[i], counts[i]) end
      redis.call('SET', key, table.concat(words, ' '), 'PX', ttl_ms(reset_after))
    end
    return 1, amount, amount - total, reset_after, 0, 0, cost
  end
  local remaining = 0
  if total < amount then remaining = amount - total end
  local reset_after = 0.0
  if n > 0 then reset_after = starts[n] + span - now end
  if cost > amount then return 0, amount, remaining, reset_after, inf, 0, 0 end
  -- The hit fits once enough of the oldest buckets have left the window.
  local need = total + cost - amount
  local i = 1
  while need > counts[i] do
    need = need - counts[i]
    i = i + 1
  end
  return 0, amount, remaining, reset_after, starts[i] + span - now, 0, 0
end
