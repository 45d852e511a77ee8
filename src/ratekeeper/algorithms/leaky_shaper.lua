-- Leaky bucket (shaper): the twin of leaky_shaper.py. State: "backlog t", the seconds of work
-- queued at time t.
local leaky_shaper, leaky_shaper_refund
if NEEDS.leaky_shaper then
  function leaky_shaper(key, now, cost, a)
    local interval = tonumber(ARGV[a + INTERVAL])
    local capacity = tonumber(ARGV[a + CAPACITY])
    local tolerance = capacity * interval
    local backlog = 0.0
    local saved, last = load2(key)
    if saved then
      backlog = saved - (now - last)
      if backlog < 0.0 then backlog = 0.0 end
    end
    local room = tolerance + tolerance * EPSILON
    local after = backlog + cost * interval
    if after <= room then
      if cost ~= 0 then save2(key, after, after, now) end
      return 1, capacity, floor((room - after) / interval), after, 0, backlog, cost
    end
    if cost ~= 0 and ARGV[a + DEBT] == '1' then
      -- Counted all the same: the schedule is pushed later.
      local retry = inf
      if cost <= capacity then retry = after + cost * interval - tolerance end
      save2(key, after, after, now)
      return 0, capacity, 0, after, retry, 0, cost
    end
    -- Python's int() truncates where floor rounds down: they differ only below 0, clamped to 0.
    local remaining = floor((room - backlog) / interval)
    if remaining < 0 then remaining = 0 end
    local retry = inf
    if cost <= capacity then retry = after - tolerance end
    return 0, capacity, remaining, backlog, retry, 0, 0
  end

  if REFUNDS then
    function leaky_shaper_refund(key, now, cost, a)
      local backlog, last = load2(key)
      if not backlog then return end
      backlog = backlog - cost * tonumber(ARGV[a + INTERVAL])
      if backlog < 0.0 then backlog = 0.0 end
      keep2(key, backlog, last)
    end
  end
end
