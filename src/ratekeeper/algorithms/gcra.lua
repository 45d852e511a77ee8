-- GCRA: the twin of gcra.py. State: "backlog t" (the TAT as its distance from t).
local gcra, gcra_refund, gcra_hold
if NEEDS.gcra then
  function gcra(key, now, cost, a)
    local interval = tonumber(ARGV[a + INTERVAL])
    local capacity = tonumber(ARGV[a + CAPACITY])
    local backlog = 0.0
    local saved, last = load2(key)
    if saved then
      backlog = saved - (now - last) -- a clock that steps back only adds backlog
      if backlog < 0.0 then backlog = 0.0 end
    end
    local after = backlog + cost * interval
    -- Room left in hits of cost 1, with a slack relative to the whole bucket for float rounding.
    local room = capacity + capacity * EPSILON - after / interval
    if room >= 0.0 then
      if cost ~= 0 then save2(key, after, after, now) end
      return 1, capacity, floor(room), after, 0, 0, cost
    end
    if cost ~= 0 and ARGV[a + DEBT] == '1' then
      -- Counted all the same: the TAT passes now + tau.
      local retry = inf
      if cost <= capacity then retry = after + cost * interval - capacity * interval end
      save2(key, after, after, now)
      return 0, capacity, 0, after, retry, 0, cost
    end
    local free = room + cost
    local remaining = 0
    if free > 0.0 then remaining = floor(free) end
    local retry = inf
    if cost <= capacity then retry = after - capacity * interval end
    return 0, capacity, remaining, backlog, retry, 0, 0
  end

  if REFUNDS then
    function gcra_refund(key, now, cost, a)
      local backlog, last = load2(key)
      if not backlog then return end
      backlog = backlog - cost * tonumber(ARGV[a + INTERVAL])
      if backlog < 0.0 then backlog = 0.0 end
      keep2(key, backlog, last)
    end
  end

  if HOLDS then
    -- gcra.hold: the backlog at `now`, kept at least the `held` units' worth.
    function gcra_hold(key, now, held, a)
      if held <= 0 then return end
      local backlog = 0.0
      local saved, last = load2(key)
      if saved then backlog = saved - (now - last) end
      local bottom = held * tonumber(ARGV[a + INTERVAL])
      if backlog < bottom then backlog = bottom end
      save2(key, backlog, backlog, now)
    end
  end
end
