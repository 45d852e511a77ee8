-- Sliding log: the twin of sliding_log.py. State: a list of "%.17g" timestamps, oldest first,
-- one per admitted unit of cost. A hit reads the list's length and ends, and more entries only
-- when some left the window (galloping) or when it is denied.
local sliding_log, sliding_log_refund
if NEEDS.sliding_log then
  function sliding_log(key, now, cost, a)
    local amount = tonumber(ARGV[a + AMOUNT])
    local period = tonumber(ARGV[a + PERIOD])
    local edge = now - period
    -- The entries at the head that left the window, and the newest when some is in it.
    local size, gone, last = split_list(key, edge)
    local count = size - gone
    if count + cost <= amount then
      if cost == 0 then
        local reset_after = 0.0
        if last then reset_after = last + period - now end
        return 1, amount, amount - count, reset_after, 0, 0, 0
      end
      local behind = last ~= nil and now < last -- the clock went backwards: keep the log sorted
      if not behind then last = now end
      local reset_after = last + period - now
      if gone > 0 then redis.call('LTRIM', key, gone, -1) end
      add_sorted(key, now, cost, count, behind, reset_after)
      return 1, amount, amount - count - cost, reset_after, 0, 0, cost
    end
    local remaining = 0
    if count < amount then remaining = amount - count end
    local reset_after = 0.0
    if last then reset_after = last + period - now end
    if cost > amount then return 0, amount, remaining, reset_after, inf, 0, 0 end -- never fits
    -- The hit fits once the oldest `count + cost - amount` entries have left the window.
    local leaving = tonumber(redis.call('LINDEX', key, gone + count + cost - amount - 1))
    return 0, amount, remaining, reset_after, leaving + period - now, 0, 0
  end

  if REFUNDS then
    -- Remove up to `cost` entries stamped `now`, from the tail, where they most likely are.
    function sliding_log_refund(key, now, cost, a)
      if cost > 0 then redis.call('LREM', key, -cost, format('%.17g', now)) end
    end
  end
end
