-- Bucketed sliding window: the twin of bucketed_window.py. State: "start count start count ...",
-- the non-empty buckets in the window, oldest first (their total is summed on load). A hit
-- reads every bucket's count, but writes the buckets it keeps as they were read and formats
-- only the newest.
local bucketed_window, bucketed_window_refund
if NEEDS.bucketed_window then
  -- Count `cost` in the current bucket (or a later one if the clock went backwards), else in a
  -- new bucket at `current` after the kept ones: the state to write back, the newest bucket's
  -- start, and the number of kept buckets.
  local function count_in(raw, first, last, starts, counts, n, newest, current, half, cost)
    if newest and newest > current - half then
      counts[n] = counts[n] + cost
      return string.sub(raw, first, last - 1) .. starts[n] .. format(' %d', counts[n]), newest, n
    end
    local value = format('%.17g %d', current, cost)
    if n > 0 then value = string.sub(raw, first) .. ' ' .. value end
    n = n + 1
    starts[n] = current
    counts[n] = cost
    return value, current, n
  end

  function bucketed_window(key, now, cost, a)
    local amount = tonumber(ARGV[a + AMOUNT])
    local width = tonumber(ARGV[a + BUCKET])
    -- The window's length in whole buckets (a partial last bucket counts as a whole one).
    local span = floor(tonumber(ARGV[a + PERIOD]) / width + 0.999999999) * width
    local current = now - pymod(now, width)
    -- Bucket starts lie on a grid of `width`; half a bucket of slack absorbs float error.
    local half = 0.5 * width
    local cutoff = current - span + half -- a bucket is in the window while its start is above this
    -- The kept buckets: their starts as read (converted when needed) and counts.
    local starts, counts, n, total = {}, {}, 0, 0
    local newest = nil -- the newest kept bucket's start
    local first, last = 0, 0 -- where the kept buckets, and the newest one, begin in `raw`
    local raw = redis.call('GET', key)
    if raw then
      -- The starts are sorted, so dropping those at or before the cutoff drops a prefix, as the
      -- Python step does.
      for at, start, units in string.gmatch(raw, '()(%S+) (%S+)') do
        if n > 0 or tonumber(start) > cutoff then
          units = tonumber(units)
          n = n + 1
          starts[n] = start
          counts[n] = units
          total = total + units
          if n == 1 then first = at end
          last = at
        end
      end
      if n > 0 then newest = tonumber(starts[n]) end
    end
    if total + cost <= amount then
      if cost ~= 0 then
        local value
        value, newest, n = count_in(raw, first, last, starts, counts, n, newest, current, half, cost)
        total = total + cost
        local reset_after = newest + span - now
        redis.call('SET', key, value, 'PX', ttl_ms(reset_after))
        return 1, amount, amount - total, reset_after, 0, 0, cost
      end
      local reset_after = 0.0
      if newest then reset_after = newest + span - now end
      return 1, amount, amount - total, reset_after, 0, 0, 0
    end
    local granted = 0
    if cost ~= 0 and ARGV[a + DEBT] == '1' then
      -- Counted all the same, in the current bucket, as if admitted.
      local value
      value, newest, n = count_in(raw, first, last, starts, counts, n, newest, current, half, cost)
      total = total + cost
      redis.call('SET', key, value, 'PX', ttl_ms(newest + span - now))
      granted = cost
    end
    local remaining = 0
    if total < amount then remaining = amount - total end
    local reset_after = 0.0
    if newest then reset_after = newest + span - now end
    if cost > amount then return 0, amount, remaining, reset_after, inf, 0, granted end
    -- The hit fits once enough of the oldest buckets have left the window.
    local need = total + cost - amount
    local i = 1
    while need > counts[i] do
      need = need - counts[i]
      i = i + 1
    end
    return 0, amount, remaining, reset_after, tonumber(starts[i]) + span - now, 0, granted
  end

  if REFUNDS then
    -- Take the cost from the bucket holding `now`; the others are written back as read.
    function bucketed_window_refund(key, now, cost, a)
      local raw = redis.call('GET', key)
      if not raw then return end
      local width = tonumber(ARGV[a + BUCKET])
      local current = now - pymod(now, width)
      local half = 0.5 * width
      local low, high = current - half, current + half
      local parts, n, found = {}, 0, false
      for start, units in string.gmatch(raw, '(%S+) (%S+)') do
        local at = tonumber(start)
        if not found and low < at and at < high then
          found = true
          units = tonumber(units)
          if units > cost then
            n = n + 1
            parts[n] = start .. format(' %d', units - cost)
          end
        else
          n = n + 1
          parts[n] = start .. ' ' .. units
        end
      end
      if not found then return end
      if n == 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, table.concat(parts, ' '), 'KEEPTTL')
      end
    end
  end
end
