-- Token bucket: the twin of token_bucket.py. State: "tokens t".
local token_bucket, token_bucket_refund, token_bucket_hold
if NEEDS.token_bucket then
  function token_bucket(key, now, cost, a)
    local capacity = tonumber(ARGV[a + CAPACITY])
    local rate = tonumber(ARGV[a + RATE])
    local tokens = capacity
    local at = now -- the time the decision is taken as of
    local skew = 0.0
    local saved, last = load2(key)
    if saved then
      tokens = saved
      if now < last then
        -- A clock that stepped back (token_bucket._behind): decide as of the state's own time,
        -- so that the same span is never refilled twice, and report the waits from `now`.
        skew = last - now
        at = last
      end
      tokens = tokens + (at - last) * rate
      if tokens > capacity then tokens = capacity end
    end
    local left = tokens - cost
    local granted = cost
    if left <= -EPSILON then
      local whole = floor(tokens + EPSILON)
      local wait
      if ARGV[a + PARTIAL] == '1' then
        if whole < 1 then
          wait = (1.0 - tokens) / rate
        else
          left = tokens - whole
          granted = whole
        end
      elseif cost ~= 0 and ARGV[a + DEBT] == '1' then
        -- Counted all the same: the bucket goes below empty.
        local reset_after = (capacity - left) / rate
        local retry = inf
        if cost <= capacity then retry = (cost - left) / rate end
        if at ~= now then
          reset_after = reset_after + skew
          retry = retry + skew
        end
        save2(key, reset_after, left, at)
        return 0, capacity, 0, reset_after, retry, 0, cost
      elseif cost <= capacity then
        wait = -left / rate
      else
        wait = inf
      end
      if wait then
        local reset_after = (capacity - tokens) / rate
        if at ~= now then
          reset_after = reset_after + skew
          wait = wait + skew
        end
        if whole < 0 then whole = 0 end
        return 0, capacity, whole, reset_after, wait, 0, 0
      end
    end
    if left < 0.0 then left = 0.0 end
    local reset_after = (capacity - left) / rate
    if at ~= now then reset_after = reset_after + skew end
    if granted ~= 0 then save2(key, reset_after, left, at) end
    return 1, capacity, floor(left + EPSILON), reset_after, 0, 0, granted
  end

  if REFUNDS then
    function token_bucket_refund(key, now, cost, a)
      local tokens, last = load2(key)
      if not tokens then return end
      local capacity = tonumber(ARGV[a + CAPACITY])
      tokens = tokens + cost
      if tokens > capacity then tokens = capacity end
      keep2(key, tokens, last)
    end
  end

  if HOLDS then
    -- token_bucket.hold: refill to `now`, up to the capacity less the `held` tokens.
    function token_bucket_hold(key, now, held, a)
      if held <= 0 then return end
      local capacity = tonumber(ARGV[a + CAPACITY])
      local rate = tonumber(ARGV[a + RATE])
      local tokens, last = load2(key)
      if not tokens then
        tokens, last = capacity, now
      elseif now > last then
        tokens = tokens + (now - last) * rate
        last = now
      end
      local top = capacity - held
      if tokens > top then tokens = top end
      save2(key, (capacity - tokens) / rate, tokens, last)
    end
  end
end
