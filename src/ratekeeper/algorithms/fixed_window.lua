-- Fixed window: the twin of fixed_window.py. State: "start count".
local fixed_window, fixed_window_refund
if NEEDS.fixed_window then
  local DAY = 86400.0
  local WEEK = 7 * DAY
  local MONDAY = 4 * DAY -- 1970-01-05, the first Monday after the epoch

  -- fixed_window.window() for a calendar unit: (start, end) of the window holding `now`. (Its
  -- helper is local to it, so that only calendar hits make its closure.)
  local function calendar_window(now, unit)
    if unit == 'day' then
      local start = now - pymod(now, DAY)
      return start, start + DAY
    end
    if unit == 'week' then
      local start = now - pymod(now - MONDAY, WEEK)
      return start, start + WEEK
    end
    -- Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    local function days_from_civil(y, m, d)
      if m <= 2 then y = y - 1 end
      local era = floor(y / 400)
      local yoe = y - era * 400
      local mp = m > 2 and m - 3 or m + 9
      local doy = floor((153 * mp + 2) / 5) + d - 1
      local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
      return era * 146097 + doe - 719468
    end
    -- The whole second datetime.fromtimestamp(now) lands in: CPython truncates, rounds the
    -- fraction to microseconds half to even, and carries a rounded-up fraction into the second.
    local second
    if now >= 0 then
      second = floor(now)
      if (now - second) * 1e6 >= 999999.5 then second = second + 1 end
    else
      second = -floor(-now)
      if (now - second) * 1e6 < -0.5 then second = second - 1 end
    end
    -- Its year and month (Hinnant's civil_from_days).
    local z = floor(second / DAY) + 719468
    local era = floor(z / 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
    local mp = floor((5 * doy + 2) / 153)
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400
    if m <= 2 then y = y + 1 end
    if unit == 'month' then
      local following
      if m == 12 then
        following = days_from_civil(y + 1, 1, 1)
      else
        following = days_from_civil(y, m + 1, 1)
      end
      return days_from_civil(y, m, 1) * DAY, following * DAY
    end
    return days_from_civil(y, 1, 1) * DAY, days_from_civil(y + 1, 1, 1) * DAY
  end

  function fixed_window(key, now, cost, a)
    local amount = tonumber(ARGV[a + AMOUNT])
    local unit = ARGV[a + UNIT]
    local start, stop
    if unit ~= '' then
      start, stop = calendar_window(now, unit)
    else
      local period = tonumber(ARGV[a + PERIOD])
      start = now - pymod(now, period)
      stop = start + period
    end
    local count = 0
    local saved, counted = load2(key)
    if saved == start then count = counted end
    count = count + cost
    if count <= amount then
      local reset_after = 0.0
      if count ~= 0 then reset_after = stop - now end
      if cost ~= 0 then save2(key, reset_after, start, count) end
      return 1, amount, amount - count, reset_after, 0, 0, cost
    end
    local left = stop - now
    local retry = inf
    if cost <= amount then retry = left end
    if cost ~= 0 and ARGV[a + DEBT] == '1' then -- counted all the same: the count passes the amount
      save2(key, left, start, count)
      return 0, amount, 0, left, retry, 0, cost
    end
    count = count - cost
    local reset_after = 0.0
    if count ~= 0 then reset_after = left end
    local remaining = 0
    if count < amount then remaining = amount - count end
    return 0, amount, remaining, reset_after, retry, 0, 0
  end

  if REFUNDS then
    function fixed_window_refund(key, now, cost, a)
      local saved, counted = load2(key)
      if not saved then return end
      local start
      local unit = ARGV[a + UNIT]
      if unit ~= '' then
        start = calendar_window(now, unit)
      else
        start = now - pymod(now, tonumber(ARGV[a + PERIOD]))
      end
      if saved ~= start then return end -- a later window: the hit is forgotten already
      local count = counted - cost
      if count > 0 then keep2(key, start, count) else redis.call('DEL', key) end
    end
  end
end
