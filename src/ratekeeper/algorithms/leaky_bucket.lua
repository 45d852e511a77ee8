-- Leaky bucket (meter): the twin of leaky_bucket.py. State: "level t".
local leaky_bucket, leaky_bucket_refund, leaky_bucket_hold
if NEEDS.leaky_bucket then
  function leaky_bucket(key, now, cost, a)
    local capacity = tonumber(ARGV[a + CAPACITY])
    local level = 0.0
    local saved, last = load2(key)
    if saved then
      level = saved - (now - last) * tonumber(ARGV[a + RATE])
      if level < 0.0 then level = 0.0 end
    end
    local interval = tonumber(ARGV[a + INTERVAL])
    local room = capacity + capacity * EPSILON
    local after = level + cost
    if after <= room then
      local reset_after = after * interval
      if cost ~= 0 then save2(key, reset_after, after, now) end
      return 1, capacity, floor(room - after), reset_after, 0, 0, cost
    end
    if cost ~= 0 and ARGV[a + DEBT] == '1' then
      -- Counted all the same: the level rises above the capacity.
      local reset_after = after * interval
      local retry = inf
      if cost <= capacity then retry = (after + cost - capacity) * interval end
      save2(key, reset_after, after, now)
      return 0, capacity, 0, reset_after, retry, 0, cost
    end
    -- Python's int() truncates where floor rounds down: they differ only below 0, clamped to 0.
    local remaining = floor(room - level)
    if remaining < 0 then remaining = 0 end
    local retry = inf
    if cost <= capacity then retry = (after - capacity) * interval end
    return 0, capacity, remaining, level * interval, retry, 0, 0
  end

  if REFUNDS then
    function leaky_bucket_refund(key, now, cost, a)
      local level, last = load2(key)
      if not level then return end
      level = level - cost
      if level < 0.0 then level = 0.0 end
      keep2(key, level, last)
    end
  end

  if HOLDS then
    -- leaky_bucket.hold: the level at `now`, kept at least the `held` units.
    function leaky_bucket_hold(key, now, held, a)
      if held <= 0 then return end
      local level = 0.0
      local saved, last = load2(key)
      if saved then level = saved - (now - last) * tonumber(ARGV[a + RATE]) end
      if level < held then level = held end
      save2(key, level * tonumber(ARGV[a + INTERVAL]), level, now)
    end
  end
end
