-- Sliding window counter: the twin of sliding_counter.py. State: start, previous, current,
-- packed as three doubles (see the prelude).
local sliding_counter, sliding_counter_refund
if NEEDS.sliding_counter then
  function sliding_counter(key, now, cost, a)
    local amount = tonumber(ARGV[a + AMOUNT])
    local period = tonumber(ARGV[a + PERIOD])
    local start, previous, current
    local raw = redis.call('GET', key)
    if raw and #raw == 24 then start, previous, current = unpack_state('<ddd', raw) end
    if not start then
      start = now - pymod(now, period)
      previous = 0
      current = 0
    else
      if now - start >= period then
        -- A later window; starts are compared with half a period of slack.
        local later = now - pymod(now, period)
        local advanced = later - start
        if advanced >= 0.5 * period then
          start = later
          if advanced < 1.5 * period then previous = current else previous = 0 end
          current = 0
        end
      end
    end
    -- Seconds until this window ends; at most a period, should the clock go backwards.
    local left = start + period - now
    if left > period then left = period end
    local estimate = current
    if previous ~= 0 then estimate = previous * left / period + current end
    local reset_after = 0.0
    if current ~= 0 then
      reset_after = left + period
    elseif previous ~= 0 then
      reset_after = left
    end
    if estimate + cost <= amount + EPSILON then
      if cost ~= 0 then
        current = current + cost
        estimate = estimate + cost
        reset_after = left + period
        redis.call('SET', key, pack('<ddd', start, previous, current),
          'PX', ttl_ms(reset_after))
      end
      local remaining = 0
      if estimate < amount then remaining = floor(amount - estimate + EPSILON) end
      return 1, amount, remaining, reset_after, 0, 0, cost
    end
    local granted = 0
    if cost ~= 0 and ARGV[a + DEBT] == '1' then
      -- Counted all the same: the current count passes the amount.
      current = current + cost
      estimate = estimate + cost
      reset_after = left + period
      redis.call('SET', key, pack('<ddd', start, previous, current), 'PX', ttl_ms(reset_after))
      granted = cost
    end
    local remaining = 0
    if estimate < amount then remaining = floor(amount - estimate + EPSILON) end
    if cost > amount then return 0, amount, remaining, reset_after, inf, 0, granted end
    local room = amount - cost - current
    local retry
    if room >= 0 then
      -- The weighted previous count decays enough before this window ends.
      retry = left - room * period / previous
    else
      -- Only in the next window, as this window's count decays there in its turn.
      retry = left + period - (amount - cost) * period / current
    end
    if retry < 0.0 then retry = 0.0 end
    return 0, amount, remaining, reset_after, retry, 0, granted
  end

  if REFUNDS then
    function sliding_counter_refund(key, now, cost, a)
      local raw = redis.call('GET', key)
      if not raw or #raw ~= 24 then return end
      local start, previous, current = unpack_state('<ddd', raw)
      local period = tonumber(ARGV[a + PERIOD])
      local moved = start - (now - pymod(now, period)) -- how far the state is past the hit
      if -0.5 * period < moved and moved < 0.5 * period then
        if current > cost then current = current - cost else current = 0 end
      elseif 0.5 * period <= moved and moved < 1.5 * period then
        if previous > cost then previous = previous - cost else previous = 0 end
      else
        return
      end
      if previous == 0 and current == 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, pack('<ddd', start, previous, current), 'KEEPTTL')
      end
    end
  end
end
