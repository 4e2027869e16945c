-- stepped.lua: the stepped log (part of the allow script; decide.lua holds
-- the protocol and decides with these functions; refund.lua refunds).
--
-- A stepped log counts units per step-long bucket (bucket b covers the µs
-- b*step up to (b+1)*step) rather than one member per unit, so that its
-- size does not grow with its quota. It is one string:
--   [0, HDR)         a header of seven little-endian doubles: o, the oldest
--                    bucket kept; n, the newest; t, the units in o..n; W,
--                    the longest window counted at this step while the log
--                    lives (it keeps W of history); seq, how many
--                    admissions it recorded; E, the Unix ms (on the
--                    deciders' clock) until which it lives, renewed for
--                    two windows and a step once less than a window and a
--                    step is left; and p, the units of bucket n.
--   [HDR, FP0)       the staging: the fingerprints (below) of the
--                    admissions since seq was last a multiple of STAGE, the
--                    one of seq - seq % STAGE + i in place i, written with
--                    the header; the admission that makes the staging
--                    whole writes its fingerprints to their places below
--                    too. Its places from seq % STAGE on hold nothing
--                    current.
--   [FP0, IDS0)      IDS fingerprints of two bytes, the last two of the id
--                    of the entry of the same index: an admission reads
--                    them and the staging with the header, and looks for
--                    its id among the entries only when its fingerprint is
--                    there (one call in about 500 that is not a retry), so
--                    that a fresh id costs no read of the entries. The
--                    fingerprints of the admissions staged are current in
--                    the staging only, so that an admission writes no more
--                    than STAGE of them: every byte of a string costs Redis
--                    a step of its hash when the script makes or reads it.
--   [IDS0, RING0)    the request ids of the last IDS admissions, in the
--                    order they came, entry seq % IDS holding the seq-th:
--                    the 8-byte id, the bucket as a little-endian double
--                    and the units as a little-endian 48-bit integer. A
--                    retried call is found here, and a refund finds its
--                    bucket. A refunded entry is zeroed (its fingerprint
--                    stays: a fingerprint only sends a search here).
--   [RING0, SIZE)    a ring of RING big-endian 48-bit counts (up to 2^48,
--                    past any quota), as BITFIELD keeps them: bucket b in slot b % RING, for b in
--                    o..n-1. The newest bucket counts in the header (p),
--                    so that an admission to it, the commonest, writes no
--                    slot. When a later bucket becomes the newest, n's
--                    count goes to its slot and the slots of the buckets
--                    between are zeroed (ring_open), so every slot is
--                    written as its bucket enters o..n-1, and an eviction
--                    leaves the slots it frees as they are.
-- RING exceeds the most steps a window may span (1,440) by the two buckets
-- a window straddles, and slack.
local HDR, STAGE, IDS, ENTRY, RING = 56, 8, 128, 22, 1444
local FP0 = HDR + 2 * STAGE
local IDS0 = FP0 + 2 * IDS
local RING0 = IDS0 + IDS * ENTRY
local SIZE = RING0 + 6 * RING
-- HDR - 1, IDS0 and IDS0 - 1, not formatted at every call (STAGE divides
-- IDS, so a staging's places are a run of entries)
local HDR_LAST, IDS0_S, IDS0_LAST = '55', '328', '327'

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
local function header(key, o, n, t, w, seq, e, p)
  call('SETRANGE', key, '0', struct.pack('<ddddddd', o, n, t, w, seq, e, p))
end

-- stepped_ids returns the entries of the log key that hold ids, entry 0
-- first, given the log's seq: only those, read only when an id is looked
-- for. Redis's Lua hashes every byte of a string it is given: reading the
-- whole ring with the header made that hashing a fifth of a stepped
-- admission's instructions.
stepped_ids = function(key, seq)
  if seq <= 0 then
    return ''
  end
  return call('GETRANGE', key, IDS0_S, string.format('%d', IDS0 + ENTRY * math.min(seq, IDS) - 1))
end

-- stepped_find returns the entry (0-based) of id among ids (as
-- stepped_ids returns them), or nil.
stepped_find = function(ids, id)
  local at = string.find(ids, id, 1, true)
  while at and (at - 1) % ENTRY ~= 0 do
    at = string.find(ids, id, at + 1, true)
  end
  if at then
    return (at - 1) / ENTRY
  end
  return nil
end

-- stepped decides a request of cost units recorded as id ("" to peek) on
-- the stepped log key of step, counted by the nlim limits whose pairs start
-- at ARGV[x] (q1 and w1 as in exact.lua), at now. It evicts the buckets older than the
-- history the log keeps, counts each limit, records the units in the bucket
-- of now if the request is admitted, writes the header when the log's state
-- calls for it (unless id is "", a peek: the log lives two windows and a
-- step from now once less than a window and a step is left), and puts each
-- limit's three values in out from out[o] on, as exact does.
--
-- Alone (part nil) it decides the request by these limits, a retried call
-- when its id is among the ids kept, and returns whether it is admitted and
-- whether it was a retried call. As a part of a request of several, it is
-- called twice with one table, part, as exact is: the state it keeps there
-- is grow, W, E, o, n, t, seq, the bucket an admission goes to, whether
-- the log is new, its header and fingerprints as read, and p.
stepped = function(key, step, cost, id, now, x, nlim, q1, w1, out, o, part)
  local grow, w, e, ob, n, t, seq, bk, new, h, p
  local admit, allowed, duplicate, evicted = false, false, false, false
  -- id's fingerprint (its last two bytes; an id of one, which the limiter
  -- never sends, padded): the one the read looks for, the write writes.
  local fp = ''
  if id ~= '' then
    fp = string.sub(id, -2)
    if #fp < 2 then
      fp = '\0' .. fp
    end
  end
  if part and part.admit ~= nil then
    grow, w, e, ob, n, t, seq, bk, new, h, p = part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10], part[11]
    admit, allowed = part.admit, part.allowed
  else
    h = call('GETRANGE', key, '0', IDS0_LAST)
    ob, n, t, w, seq, e, p = 0, 0, 0, 0, 0, 0, 0
    new, grow = #h < HDR, false
    if not new then
      ob, n, t, w, seq, e, p = struct.unpack('<ddddddd', h)
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
        header(key, ob, n, t, w, seq, e, p)
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
    -- A retried call: its id is among the entries. Only an id whose
    -- fingerprint is staged or among the first min(seq, IDS) is looked
    -- for there.
    if id ~= '' and seq > 0 then
      local last, staged = FP0 + 2 * IDS, HDR + 2 * (seq % STAGE)
      if seq < IDS then
        last = FP0 + 2 * seq
      end
      local at = string.find(h, fp, HDR + 1, true)
      -- not at a fingerprint's start, or in a place of the staging unused
      while at and at < last and ((at - HDR) % 2 == 0 or at > staged and at <= FP0) do
        at = string.find(h, fp, at + 1, true)
      end
      duplicate = at ~= nil and at < last and stepped_find(stepped_ids(key, seq), id) ~= nil
    end
    if part then
      part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10], part[11] = grow, w, e, ob, n, t, seq, bk, new, h, p
      part.seen = duplicate
      return
    end
    allowed, admit = fits or duplicate, fits and not duplicate and id ~= ''
  end

  if admit or id ~= '' and grow and not new then
    local k, j = seq % IDS, seq % STAGE -- an admission's entry, and its fingerprint's place in the staging
    if admit then
      if new then
        -- Made whole at once, so Redis never grows it (and doubles it):
        -- SETRANGE past the end of a missing key makes a string of
        -- exactly that length, zeroed.
        call('SETRANGE', key, SIZE - 1, '\0')
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
      call('SETRANGE', key, string.format('%d', IDS0 + ENTRY * k), struct.pack('<c0dI6', id, bk, cost))
      seq = seq + 1
    end
    if grow or e * 1000 - now < w + step then
      local life = math.ceil((2 * w + step) / 1000) -- two windows and a step
      e = math.floor(now / 1000) + life
      call('PEXPIRE', key, string.format('%d', life))
    end
    if admit then
      -- The header and the staged fingerprints up to the admission's, at
      -- once; the staging whole, its fingerprints go to their places too.
      -- (Joined by .., which copies a string at once, where struct.pack
      -- copies it byte by byte.)
      local staged = string.sub(h, HDR + 1, HDR + 2 * j) .. fp
      call('SETRANGE', key, '0', struct.pack('<ddddddd', ob, n, t, w, seq, e, p) .. staged)
      if j == STAGE - 1 then
        call('SETRANGE', key, string.format('%d', FP0 + 2 * (k - j)), staged)
      end
    else
      header(key, ob, n, t, w, seq, e, p)
    end
  elseif evicted then
    header(key, ob, n, t, w, seq, e, p)
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
  return allowed, duplicate
end
