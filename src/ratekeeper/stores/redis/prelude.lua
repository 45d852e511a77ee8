-- ratekeeper: what every algorithm's Lua step shares. The store builds its scripts from it
-- (scripts.py): the batch script, this file, every algorithm's .lua
-- (src/ratekeeper/algorithms/) and dispatch.lua; for each algorithm, its single-hit script,
-- this file, that algorithm's .lua and single.lua; the refund script, as the batch script
-- with refund.lua; and the release script, this file, concurrency.lua and release.lua. A
-- header before this file defines NEEDS, the set of algorithms the call may run (see "NEEDS"
-- below), and REFUNDS, true in the refund script only.
--
-- A step is a function NAME(key, now, cost, a). `a` locates the hit's limit in ARGV: its fields
-- are ARGV[a + AMOUNT], ARGV[a + PERIOD], ... (layout in dispatch.lua). It returns the
-- decision as seven values, no table:
--   allowed (1/0), limit, remaining, reset_after, retry_after, delay, granted
-- and, when the hit consumes (allowed with a non-zero cost, or refused under a limit with debt,
-- ARGV[a + DEBT] '1', which counts it all the same), writes the new state before it returns;
-- every write sets a TTL. A look (cost 0) and any other denied hit write nothing.
-- It performs the same float operations, in the same order, as the Python step beside it.
--
-- Redis runs the whole chunk on every call, and every function it defines is a closure made
-- anew each time. So an algorithm file defines its step only when the call needs it:
--   local NAME
--   if NEEDS.NAME then
--     function NAME(key, now, cost, a) ... end
--   end
-- helpers are few, and steps return values rather than tables. Each algorithm file also
-- defines, only when REFUNDS is set, NAME_refund(key, now, cost, a): its Python module's
-- `refund`, which takes back `cost` units its step admitted at `now`, writes with the key's
-- TTL kept (or deletes a state left holding nothing), and returns nothing.
--
-- Every cost (and the slots a release frees) reaches a script as ARGV text, which each entry
-- point checks before anything is written: a non-negative integer of at most 16 digits
-- ('^%d+$'), or an error reply 'ratekeeper: invalid cost <text>'. So no client sharing the
-- server can store a NaN, an infinity or a negative count under a key.

local EPSILON = 1e-9
local inf = math.huge
local floor = math.floor
local fmod = math.fmod
local format = string.format
local match = string.match
local tonumber = tonumber

-- Offsets of a limit's fields in ARGV from its base `a` (ARGV[a + 1] is the algorithm).
local AMOUNT, PERIOD, CAPACITY, RATE, INTERVAL, BUCKET, UNIT, PARTIAL, DEBT =
  2, 3, 4, 5, 6, 7, 8, 9, 10
local LIMIT_FIELDS = 10

-- NEEDS: the algorithms this call runs, defined by the header. The batch script reads them
-- from its ARGV (ARGV[3] limits follow from ARGV[4], each LIMIT_FIELDS long, the algorithm
-- first); a single-hit script names its one algorithm.

-- Milliseconds a key must live: until its state is fully available again, plus a second so
-- that a caller's own `now` running a little ahead of the server never loses state.
local function ttl_ms(seconds)
  if seconds ~= seconds or seconds == inf then return 86400000 end
  if seconds < 0 then return 1000 end
  return floor(seconds * 1000) + 1000
end

-- A decision in a reply (single.lua, dispatch.lua): one string of the fields of Python's
-- `Decision`, in its order, little-endian: allowed (one byte), limit and remaining (8-byte
-- integers), reset_after, retry_after and delay (doubles, every bit kept, nothing formatted),
-- granted (an 8-byte integer), and degraded (one byte, always 0). The store unpacks it with
-- `struct.Struct('<?qqdddq?')` (scripts.py).
local DECISION = '<Bi8i8dddi8B'
local concat = table.concat

-- A float for the release script's reply: an integer when whole (Redis replies it exactly),
-- else %.17g, which round-trips every double. -0 keeps its sign as a string.
local function num(x)
  if x == floor(x) and x < 9007199254740992 and x > -9007199254740992
      and (x ~= 0 or 1 / x > 0) then
    return x
  end
  return format('%.17g', x)
end

-- States of fixed size are one string of little-endian IEEE doubles (Redis's bundled
-- `struct`), two ("value t") or three: every bit of each float kept, and neither formatted nor
-- parsed as text. A missing or unreadable state (not 8 bytes per number) loads as nil.
local pack, unpack_state = struct.pack, struct.unpack

local function load2(key)
  local raw = redis.call('GET', key)
  if not raw or #raw ~= 16 then return nil end
  local x, y = unpack_state('<dd', raw)
  return x, y
end

local function save2(key, reset_after, x, y)
  redis.call('SET', key, pack('<dd', x, y), 'PX', ttl_ms(reset_after))
end

local keep2
if REFUNDS then
  function keep2(key, x, y)
    redis.call('SET', key, pack('<dd', x, y), 'KEEPTTL')
  end
end

-- Python's float `a % b`: math.fmod (exact), moved onto the divisor's side. (Lua's own `%` is
-- `a - floor(a / b) * b`, which rounds.) Every divisor here is positive.
local function pymod(x, y)
  local m = fmod(x, y)
  if m ~= 0 and (m < 0) ~= (y < 0) then m = m + y end
  return m
end

-- Lists (the sliding log, the concurrency slots) hold sorted "%.17g" numbers.
local bisect_list, add_sorted, split_list
if NEEDS.sliding_log or NEEDS.concurrency then
  -- Given that the entry at index `lo` is at most `x` and the one at `hi` above it, return the
  -- index of the first entry above `x` (Python's bisect_right), galloping from `lo` so that a
  -- few entries cost few reads.
  function bisect_list(key, x, lo, hi)
    local step = 1
    while lo + step < hi do
      local i = lo + step
      if tonumber(redis.call('LINDEX', key, i)) <= x then
        lo = i
        step = step * 2
      else
        hi = i
        break
      end
    end
    while hi - lo > 1 do
      local mid = floor((lo + hi) / 2)
      if tonumber(redis.call('LINDEX', key, mid)) <= x then lo = mid else hi = mid end
    end
    return hi
  end

  -- Split the sorted list at `edge`: return its size, how many entries at its head are at
  -- most `edge` (bisect_right), and its last entry when that is above `edge` (else nil).
  function split_list(key, edge)
    local size = redis.call('LLEN', key)
    if size == 0 then return 0, 0, nil end
    local last = tonumber(redis.call('LINDEX', key, -1))
    if last <= edge then return size, size, nil end
    if tonumber(redis.call('LINDEX', key, 0)) <= edge then
      return size, bisect_list(key, edge, 0, size - 1), last
    end
    return size, 0, last
  end

  -- Add `copies` copies of the number `x` to the sorted list of `size` entries, after every
  -- entry at most `x` (bisect_right, then insert), and set the list's TTL. `behind` tells that
  -- the last entry is above `x` (a clock that stepped back); else the copies go at the end.
  function add_sorted(key, x, copies, size, behind, reset_after)
    local stamp = format('%.17g', x)
    if not behind then
      if copies == 1 then
        redis.call('RPUSH', key, stamp)
      else
        local chunk = {}
        for i = 1, (copies < 512 and copies or 512) do chunk[i] = stamp end
        while copies >= 512 do
          redis.call('RPUSH', key, unpack(chunk))
          copies = copies - 512
        end
        if copies > 0 then redis.call('RPUSH', key, unpack(chunk, 1, copies)) end
      end
    else
      -- Insert before the first entry above `x`: LINSERT finds the first entry equal to that
      -- pivot, and every entry before it is below the pivot.
      local at = 0
      if tonumber(redis.call('LINDEX', key, 0)) <= x then
        at = bisect_list(key, x, 0, size - 1)
      end
      local pivot = redis.call('LINDEX', key, at)
      for _ = 1, copies do redis.call('LINSERT', key, 'BEFORE', pivot, stamp) end
    end
    redis.call('PEXPIRE', key, ttl_ms(reset_after))
  end
end
