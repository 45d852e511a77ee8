-- GCRA: the twin of gcra.py. State: "backlog t" (the TAT as its distance from t).
local function gcra(key, now, cost, p)
  local interval = p.interval
  local capacity = p.capacity
  local state = load_numbers(key)
  local backlog = 0.0
  if state then
    backlog = state[1]
    backlog = backlog - (now - state[2])
    if backlog < 0.0 then backlog = 0.0 end
  end
  local after = backlog + cost * interval
  local room = capacity + capacity * EPSILON - after / interval
  if room >= 0.0 then
    local commit = nil
    if cost ~= 0 then
      commit = function() save_numbers(key, after, {after, now}) end
    end
    return allow(capacity, floor(room), after, cost), commit
  end
  local free = room + cost
  local retry = inf
  if cost <= capacity then retry = after - capacity * interval end
  local remaining = 0
  if free > 0.0 then remaining = floor(free) end
  return deny(capacity, remaining, backlog, retry), nil
end
