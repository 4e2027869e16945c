-- stepped.lua: the stepped log (part of the allow script; decide.lua holds
-- the protocol and decides with these functions; settle.lua corrects).
--
-- A stepped log counts units per step-long bucket (bucket b covers the µs
-- b*step up to (b+1)*step) rather than one member per unit, so that its
-- size does not grow with its quota. It is two keys. The log is a string:
--   [0, HDR)         a header of seven little-endian doubles: o, the oldest
--                    bucket kept; n, the newest; t, the units in o..n; W,
--                    the longest window counted at this step while the log
--                    lives (it keeps W of history); D, the µs (on the
--                    deciders' clock) from which an admission sweeps its
--                    ids (below); E, the Unix ms until which it lives,
--                    renewed for two windows and a step once less than a
--                    window and a step is left; and p, the units of bucket
--                    n.
--   [RING0, SIZE)    a ring of RING big-endian 48-bit counts (up to 2^48,
--                    past any quota), as BITFIELD keeps them ("#i" is the
--                    i-th 48-bit integer, so RING0 is a multiple of 6):
--                    bucket b in slot b % RING, for b in o..n-1. The newest
--                    bucket counts in the header (p), so that an admission
--                    to it, the commonest, writes no slot. When a later
--                    bucket becomes the newest, n's count goes to its slot
--                    and the slots of the buckets between are zeroed
--                    (ring_open), so every slot is written as its bucket
--                    enters o..n-1, and an eviction leaves the slots it
--                    frees as they are.
-- RING exceeds the most steps a window may span (1,440) by the two buckets
-- a window straddles, and slack.
--
-- Its ids are a sorted set, the key after the log's among KEYS: each
-- request the log counts is its 8-byte id, scored with the µs it was
-- admitted at (the start of its bucket if it went to a later one), so
-- that a retried call is found and counts once, and a settlement finds the
-- request's bucket, by time rather than by how many came since: an id is
-- kept for H = min(W, HORIZON) after its admission, whatever the identity
-- admits meanwhile. A request settled to a cost other than the one it was
-- admitted for (which its settlements name) has a second member, id ..
-- "$", scored -3 - cost (as in exact.lua), so that a later settlement knows
-- what the log holds for it whatever came before; and the set holds "#",
-- scored -1, so that it lives, and expires, with the log. An admission from D on sweeps the ids
-- older than H, the oldest SWEEP at a time and whole instants (D stays due
-- while more may be left); once it swept them all D is H/16 later, so that
-- a sweep comes once every H/16, or every admission while a backlog lasts:
-- the set holds the ids of at most H * 17/16 of admissions, and what a
-- backlog leaves (SWEEP an admission drains it).
local HDR, RING, RING0 = 56, 1444, 60
local SIZE = RING0 + 6 * RING
local HORIZON, SWEEP = 900000000, 64
-- HDR - 1, not formatted at every call
local HDR_LAST = '55'

-- ring_read returns the counts of buckets a..b (b - a < RING) of key;
-- given p, of a..b with b the newest bucket, whose count p the header
-- holds (one function, not two: Redis makes every function of the chunk
-- anew at every call).
local function ring_read(key, a, b, p)
  local out = {}
  if b < a then
    return out
  end
  if p then
    b = b - 1
    if b < a then
      out[1] = p
      return out
    end
  end
  local sa, sb = a % RING, b % RING
  local parts = {sa, sb}
  if sa > sb then
    parts = {sa, RING - 1, 0, sb}
  end
  for i = 1, #parts, 2 do
    local s = call('GETRANGE', key, string.format('%d', RING0 + 6 * parts[i]), string.format('%d', RING0 + 6 * parts[i + 1] + 5))
    local got = math.floor(#s / 6)
    if got > 0 then
      local v = {struct.unpack('>' .. string.rep('I6', got), s)}
      for j = 1, got do
        out[#out + 1] = v[j]
      end
    end
    for _ = got + 1, parts[i + 1] - parts[i] + 1 do
      out[#out + 1] = 0
    end
  end
  if p then
    out[#out + 1] = p
  end
  return out
end

-- ring_open writes p, the count of bucket n, to its slot and zeroes the
-- slots of n+1..b-1, as bucket b (b > n) becomes the newest.
local function ring_open(key, n, p, b)
  local count = '\0\0\0\0\0\1' -- the commonest, a constant
  if p ~= 1 then
    count = struct.pack('>I6', p)
  end
  local sa, len = n % RING, math.min(b - n, RING) -- slots of n..b-1
  if sa + len <= RING then
    if len > 1 then
      count = count .. string.rep('\0', 6 * (len - 1))
    end
    call('SETRANGE', key, string.format('%d', RING0 + 6 * sa), count)
  else
    call('SETRANGE', key, string.format('%d', RING0 + 6 * sa), count .. string.rep('\0', 6 * (RING - sa - 1)))
    call('SETRANGE', key, string.format('%d', RING0), string.rep('\0', 6 * (len - RING + sa)))
  end
end

-- header writes key's header.
local function header(key, o, n, t, w, due, e, p)
  call('SETRANGE', key, '0', struct.pack('<ddddddd', o, n, t, w, due, e, p))
end

-- stepped_horizon returns H, how long the ids of a log of history w are
-- kept.
stepped_horizon = function(w)
  if w < HORIZON then
    return w
  end
  return HORIZON
end

-- stepped decides a request of cost units recorded as id ("" to peek) on
-- the stepped log key of step and its ids, counted by the nlim limits whose
-- pairs start at ARGV[x] (q1 and w1 as in exact.lua), at now. It evicts the
-- buckets older than the history the log keeps, counts each limit, records
-- the units in the bucket of now and the id among the ids if the request is
-- admitted, writes the header when the log's state calls for it (unless id
-- is "", a peek: the log lives two windows and a step from now once less
-- than a window and a step is left), and puts each limit's three values in
-- out from out[o] on, as exact does.
--
-- Alone (part nil) it decides the request by these limits, a retried call
-- when its id is among the ids, and returns whether it is admitted and
-- whether it was a retried call. As a part of a request of several, it is
-- called twice with one table, part, as exact is: the state it keeps there
-- is grow, W, E, o, n, t, D, the bucket an admission goes to, whether the
-- log is new, and p; and part.seen, whether id is among the ids.
stepped = function(key, ids, step, cost, id, now, x, nlim, q1, w1, out, o, part)
  local grow, w, e, ob, n, t, due, bk, new, p
  local admit, allowed, duplicate, evicted = false, false, false, false
  if part and part.admit ~= nil then
    grow, w, e, ob, n, t, due, bk, new, p = part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10]
    admit, allowed = part.admit, part.allowed
  else
    local h = call('GETRANGE', key, '0', HDR_LAST)
    ob, n, t, w, due, e, p = 0, 0, 0, 0, 0, 0, 0
    new, grow = #h < HDR, false
    if not new then
      ob, n, t, w, due, e, p = struct.unpack('<ddddddd', h)
    end
    for i = 1, nlim do
      local wi = w1
      if i > 1 then
        wi = ARGV[x + 2 * i - 1] + 0
      end
      if wi > w then
        grow, w = true, wi
      end
    end
    -- The oldest bucket kept. (x - x % 1 is math.floor(x), exactly, at
    -- no call: a function call costs Redis more than the arithmetic.)
    local first = (now - w) / step
    first = first - first % 1
    if t > 0 and ob < first then
      if n < first then
        t, p = 0, 0 -- all of it left the history kept
      else
        for _, c in ipairs(ring_read(key, ob, first - 1)) do
          t = t - c
        end
        ob = first
      end
      -- Alone, the header goes with the admission's, or at the end: no
      -- other key is read before then, so nothing can fail between. A
      -- part writes it now, before another part's key is read.
      if part then
        header(key, ob, n, t, w, due, e, p)
      else
        evicted = true
      end
    end
    -- An admission goes to the bucket of now, or to the newest if another
    -- clock ran ahead: later, so never too early out of any window.
    bk = now / step
    bk = bk - bk % 1
    if t > 0 and bk < n then
      bk = n
    end
    local fits = true
    for i = 1, nlim do
      local qi, wi = q1, w1
      if i > 1 then
        qi, wi = ARGV[x + 2 * i - 2] + 0, ARGV[x + 2 * i - 1] + 0
      end
      local c = t
      if wi < w and t > 0 then
        c = 0
        for _, units in ipairs(ring_read(key, math.max(math.floor((now - wi) / step), ob), n, p)) do
          c = c + units
        end
      end
      out[o + 3 * i - 3] = c
      if qi > 0 and c + cost > qi then -- a shadow's quota is negative
        fits = false
      end
    end
    if part then
      part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10] = grow, w, e, ob, n, t, due, bk, new, p
      part.seen = id ~= '' and call('ZSCORE', ids, id) ~= false
      return
    end
    -- A retried call: its id is among the ids. One that fits is found by
    -- the admission's ZADD, below.
    duplicate = id ~= '' and not fits and call('ZSCORE', ids, id) ~= false
    allowed, admit = fits or duplicate, fits and id ~= ''
  end

  if admit then
    -- Scored with now, or with the start of the later bucket it goes to.
    local at = now
    if bk * step > now then
      at = bk * step
    end
    if call('ZADD', ids, 'NX', string.format('%d', at), id) == 0 then
      -- Its id was there (a part's is looked for before): a retried call,
      -- which records nothing.
      admit, duplicate = false, true
    end
  end
  if admit or id ~= '' and grow and not new then
    if admit then
      if new then
        -- Made whole at once, so Redis never grows it (and doubles it):
        -- SETRANGE past the end of a missing key makes a string of
        -- exactly that length, zeroed. Nothing in its ids is due before
        -- the horizon and its sixteenth.
        call('SETRANGE', key, SIZE - 1, '\0')
        local hz = stepped_horizon(w)
        due = now + hz + hz / 16
      end
      -- The units go to the newest bucket's count in the header. A
      -- bucket past the newest becomes the newest: the count of the one
      -- before goes to its slot (ring_open).
      if t == 0 then
        ob, n, p = bk, bk, cost
      elseif bk > n then
        ring_open(key, n, p, bk)
        n, p = bk, cost
      else
        p = p + cost
      end
      t = t + cost
      if now >= due then
        -- Sweep the oldest ids older than the horizon, and their costs:
        -- SWEEP of them, and the rest of the instant (score) of the last,
        -- so that what goes does not hang on the order of ids within one.
        local hz = stepped_horizon(w)
        local r, by = call('ZRANGEBYSCORE', ids, '0', string.format('%d', now - hz), 'WITHSCORES', 'LIMIT', '0', SWEEP), 2
        local full = #r == 2 * SWEEP
        if full then
          r, by = call('ZRANGEBYSCORE', ids, '0', r[#r]), 1
        end
        local names = {}
        for j = 1, #r, by do
          names[#names + 1] = r[j]
          names[#names + 1] = r[j] .. '$'
        end
        for j = 1, #names, 1000 do
          call('ZREM', ids, unpack(names, j, math.min(j + 999, #names)))
        end
        if not full then
          due = now + hz / 16
        end
      end
    end
    if grow or e * 1000 - now < w + step then
      local life = math.ceil((2 * w + step) / 1000) -- two windows and a step
      e = math.floor(now / 1000) + life
      call('PEXPIRE', key, string.format('%d', life))
      call('ZADD', ids, '-1', '#')
      call('PEXPIRE', ids, string.format('%d', life))
    end
    header(key, ob, n, t, w, due, e, p)
  elseif evicted then
    header(key, ob, n, t, w, due, e, p)
  end

  for i = 1, nlim do
    local qi, wi = q1, w1
    if i > 1 then
      qi, wi = ARGV[x + 2 * i - 2] + 0, ARGV[x + 2 * i - 1] + 0
    end
    local shadow = qi < 0
    if shadow then
      qi = -qi
    end
    local j = o + 3 * i - 3
    local c, retry, reset = out[j], 0, 0
    local over = c + cost > qi -- this limit alone would deny
    if admit then
      c = c + cost
    end
    if over and (shadow or not allowed) then
      -- A bucket leaves the window whole, a step after its start: the
      -- limit admits once the oldest units it counts beyond the quota
      -- have left.
      local k = c + cost - qi
      local from = math.max(math.floor((now - wi) / step), ob)
      for y, units in ipairs(ring_read(key, from, n, p)) do
        k = k - units
        if k <= 0 then
          retry = (from + y) * step + wi - now
          break
        end
      end
    end
    if c > 0 then
      reset = math.max((n + 1) * step + wi - now, 0)
    end
    if c > qi then
      c = qi
    end
    out[j], out[j + 1], out[j + 2] = qi - c, retry, reset
  end
  return allowed or duplicate, duplicate
end
