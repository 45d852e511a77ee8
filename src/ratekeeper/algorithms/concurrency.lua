-- Concurrency: the twin of concurrency.py. State: a list of "%.17g" slot expiry times, sorted,
-- one per slot held.
local concurrency, concurrency_refund
if NEEDS.concurrency then
  function concurrency(key, now, cost, a)
    local amount = tonumber(ARGV[a + AMOUNT])
    -- The slots at the head that expired, and the latest expiry when some slot is live.
    local size, expired, last = split_list(key, now)
    local live = size - expired
    local free = amount - live
    if free < 0 then free = 0 end
    if cost > 0 then
      if live + cost <= amount then
        local expiry = now + tonumber(ARGV[a + PERIOD])
        local behind = last ~= nil and last > expiry
        if not behind then last = expiry end
        local reset_after = last - now
        if expired > 0 then redis.call('LTRIM', key, expired, -1) end
        add_sorted(key, expiry, cost, live, behind, reset_after)
        return 1, amount, amount - live - cost, reset_after, 0, 0, cost
      end
      local reset_after = 0.0
      if last then reset_after = last - now end
      local retry = inf
      if cost <= amount then
        retry = tonumber(redis.call('LINDEX', key, size + cost - amount - 1)) - now
      end
      return 0, amount, free, reset_after, retry, 0, 0
    end
    if cost == 0 then
      local reset_after = 0.0
      if last then reset_after = last - now end
      return 1, amount, free, reset_after, 0, 0, 0
    end
    -- A release: drop the expired slots and then the earliest-expiring live ones.
    local released = -cost
    if released > live then released = live end
    local drop = expired + released
    free = amount - (size - drop)
    if free < 0 then free = 0 end
    local reset_after = 0.0
    if drop < size then
      reset_after = last - now
      if drop > 0 then
        redis.call('LTRIM', key, drop, -1)
        redis.call('PEXPIRE', key, ttl_ms(reset_after))
      end
    elseif drop > 0 then
      redis.call('DEL', key)
    end
    return 1, amount, free, reset_after, 0, 0, -released
  end

  if REFUNDS then
    -- Remove up to `cost` slots expiring at `now + period`, the ones the hit added.
    function concurrency_refund(key, now, cost, a)
      if cost > 0 then
        redis.call('LREM', key, -cost, format('%.17g', now + tonumber(ARGV[a + PERIOD])))
      end
    end
  end
end
