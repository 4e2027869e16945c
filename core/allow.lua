-- allow.lua: sliding-window-log admission for one identity under one or more
-- limits, all counted from one log.
--
-- KEYS[1]       the identity's log: a sorted set with one member per admitted
--               unit, scored with its admission time in µs. Every exact limit
--               counts the members inside its own window, so a request is
--               recorded once whatever the number of limits, and a limit whose
--               quota or window changes counts what was admitted already.
--               The script also uses keys named after KEYS[1], so they share
--               its {hash tag} and slot. They are not declared, on purpose:
--               while Redis Cluster migrates a slot, a script declaring several
--               keys of which some do not exist yet gets TRYAGAIN until the
--               migration ends, so a new identity could not be decided; each
--               command the script sends names one key, which Redis routes.
--   KEYS[1]..":#keep"    the log's retention record, "window_us:until_ms": some
--               caller enforced a limit of that window, the longest, and the
--               log keeps that much history until the Unix ms until_ms.
--               Without it a caller with a short window would evict what
--               another caller's longer window still counts. While it
--               exists the log lives at least until until_ms, so that an
--               admission between renewals needs no PEXPIRE.
--   KEYS[1]..":#"..step  the stepped log of a step (in µs): a string of about
--               5.8 KB holding one count per step-long bucket (bucket b covers
--               the µs b*step up to (b+1)*step) in a ring, and a header with
--               the total and the log's own retention record (see RING below).
--   KEYS[1]..":#"..step..":ids"  its request ids: a sorted set of the ids of
--               the identity's last 128 admissions at that step, scored with
--               their bucket, so that a retried call counts once and a refund
--               finds it.
-- ARGV[1]       cost: how many units the request takes (1 <= cost <= every quota).
-- ARGV[2]       request id (8 random bytes), or "" to peek: evaluate, record nothing.
--               A request of cost c records the members id, id.."1", ..., id..(c-1).
-- ARGV[3]       now in microseconds as a decimal string, or "" to read Redis TIME.
-- ARGV[2+2i]    quota of limit i: the most units its window may hold. A quota of
--               0 ends the list of limits (padding; see the batch form).
-- ARGV[3+2i]    window of limit i in microseconds: "window" for a limit counted
--               exactly in the log, "window:step" for one counted in the
--               stepped log of that step. A stepped limit counts every bucket
--               its window touches, so it never admits more than its quota in
--               any window and frees a unit at most one step later than the
--               exact log would.
--
-- A batch: ARGV[1] is "*", and the decisions of several requests, each with
-- its own identity and limits, follow one another in one call:
-- KEYS          every request's keys, request after request: its log, as many
--               times as it has pairs below (the limiter sends its log once
--               per limit in either form).
-- ARGV[2..]     for each request: its number of keys n, cost, request id and
--               now (as above), then n quota and window pairs (pairs of
--               quota 0 may pad them).
-- The requests are decided in order, as that many calls would be, under one
-- TIME. A batch returns an array holding each request's reply, or its error
-- reply (a hostile key holding another type fails its own request only).
-- Redis Cluster runs a script on one slot, so only a standalone server takes
-- batches of several identities.
--
-- A request's reply is a flat array of integers:
--   [1]         1 if the request is admitted (or was admitted before), else 0
--   [2]         1 if the id was already recorded, so this is a retried call and
--               nothing was added, else 0
--   then, for each limit i, three values:
--     remaining       units left in the window after this decision
--     retry_after_us  time until limit i alone would admit this cost (0 if it does now)
--     reset_after_us  time until limit i's window is empty (0 if it is empty)
--
-- Time: Redis TIME by default, so every application server shares one clock.
-- Writes: only when every limit admits, and then the request's members to
-- the exact log (if an exact limit counts it) and its cost to the bucket of
-- now in each stepped log; a denied request leaves them as they were apart
-- from evicting what is older than the retained history.
--
-- Cost (measured in BENCHMARKS.md): for exact limits one GET of the record,
-- one ZREMRANGEBYSCORE, and per limit one ZCARD (the longest window) or
-- ZCOUNT (a shorter one); an admission adds one ZADD NX per 100 units, and
-- once a window one SET of the record and one PEXPIRE of the log, which
-- otherwise already lives long enough (see retain). For each step one
-- GETRANGE of the header, and once a step a GETRANGE and SETRANGE of the
-- buckets that left; a shorter window of the same step reads its buckets
-- (one or two GETRANGE); an admission adds one ZADD NX, ZREMRANGEBYRANK and
-- PEXPIRE of the ids, one BITFIELD INCRBY, SETRANGE and PEXPIRE of the log,
-- whatever its cost. A denial by a stepped limit reads its buckets to find
-- when enough leave. No bucket number is ever formatted: slots are offsets. ZADD NX adding nothing is what reveals a
-- retried call there, so ZSCORE runs only before a denial. An admitted request
-- is the newest member, so its reset time is the window and needs no ZRANGE
-- under Redis TIME; with a caller's clock (ARGV[3]) another server's clock may
-- run ahead, so the newest member is read.
-- The commonest request, one unit under one exact limit, takes a short
-- path (one, below) that sends the same commands with less Lua around them:
-- about 17% less of Redis's time a call (BENCHMARKS.md, run K). With no
-- retention to renew, alone or in a batch, it takes a shorter one still
-- (quick, below; runs P and Q).

local call = redis.call

-- Redis TIME, read once a call and shared by a batch's requests: now in
-- µs, and the score as a decimal string. A single request on its caller's
-- clock reads none.
local time_now, time_score
if ARGV[1] == '*' or ARGV[3] == '' then
  local t = call('TIME')
  local s, us = t[1], t[2]
  time_now = s * 1000000 + us
  -- Seconds, then the µs padded to six digits.
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  time_score = s .. us
end

-- refused answers a request of one unit under one exact limit, of quota q
-- and window w, whose window holds the newest c >= q members of log: a
-- denial, unless id is a retried call's.
local function refused(log, id, q, c, w, now)
  local allowed, duplicate, retry = 0, 0, 0
  if call('ZSCORE', log, id) then
    allowed, duplicate = 1, 1
  else
    local k = c + 1 - q
    retry = call('ZRANGE', log, k - 1 - c, k - 1 - c, 'WITHSCORES')[2] + w - now
  end
  local remaining = q - c
  if remaining < 0 then
    remaining = 0
  end
  return {allowed, duplicate, remaining, retry, call('ZRANGE', log, -1, -1, 'WITHSCORES')[2] + w - now}
end

-- quick decides the commonest request of all, one unit under one exact
-- limit (quota q_s and window w_s, as sent), recorded as id in log, when
-- its retention record is this window's own with a window or more to run,
-- so that retain (below) would write nothing: one's commands and one's
-- reply, with no other Lua function called but refused for a denial, for
-- those calls were a third of what the script added to Redis's time
-- (BENCHMARKS.md, run P). It is made before every other function, which a
-- call it decides never makes. It returns nil for anything else (a retried
-- call, a new or emptied log, a record to renew or another window's),
-- which goes on to one or decide: it wrote nothing but the eviction they
-- repeat, and leaves them the record it read.
local read_log, read_rec -- the log whose record quick read, and the record (false: none)
local function quick(log, cost, id, clock, q_s, w_s)
  local q, w = tonumber(q_s), tonumber(w_s)
  if cost ~= '1' or id == '' or not (q and w and q > 0) then
    return nil
  end
  local r = call('GET', log .. ':#keep')
  read_log, read_rec = log, r
  -- The record ("window:until") is this window's if it starts with the
  -- window's digits as sent (its writer sent them so too) and what follows
  -- them and one more character is a number, which only the colon allows:
  -- read in place, for a pattern's captures would make two more strings.
  if not r or string.find(r, w_s, 1, true) ~= 1 then
    return nil
  end
  local now, score = time_now, time_score
  if clock ~= '' then
    now, score = tonumber(clock), clock
  end
  local rec_until = tonumber(string.sub(r, #w_s + 2))
  if not rec_until or rec_until * 1000 - now < w then
    return nil
  end
  call('ZREMRANGEBYSCORE', log, '-inf', now - w)
  local c = call('ZCARD', log)
  if c >= q then
    return refused(log, id, q, c, w, now)
  end
  if c == 0 or call('ZADD', log, 'NX', score, id) == 0 then
    return nil
  end
  local reset = w
  if clock ~= '' then
    reset = call('ZRANGE', log, -1, -1, 'WITHSCORES')[2] + w - now
  end
  return {1, 0, q - c - 1, 0, reset}
end

if #ARGV == 5 then
  local out = quick(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  if out then
    return out
  end
end

-- clock_of returns now in µs and the score of an admission: Redis TIME
-- if clock is "", else the caller's clock.
local function clock_of(clock)
  if clock ~= '' then
    return tonumber(clock), clock
  end
  return time_now, time_score
end

-- ms returns d µs in whole ms, rounded up, as a decimal string.
local function ms(d)
  return tostring(math.ceil(d / 1000))
end

-- retained reads the retention record of log and evicts what is older
-- than the history to keep: longest (µs), this call's longest exact
-- window, or a longer one another caller enforced lately. It returns that
-- history, and the record's window and end (nil without a record).
local function retained(log, now, longest)
  local keep, rec_window, rec_until = longest, nil, nil
  local r = read_rec
  if log ~= read_log then
    r = call('GET', log .. ':#keep')
  end
  read_log = nil -- quick's record serves the request it read it for only
  if r then
    local w, u = string.match(r, '^(%d+):(%d+)$')
    rec_window, rec_until = tonumber(w), tonumber(u)
    if rec_window > keep and rec_until * 1000 > now then
      keep = rec_window
    end
  end
  -- Scores are exact integers in µs. The cutoffs go to Redis as Lua
  -- numbers, which Redis formats exactly (tostring and string.format's
  -- %d would not: the first rounds, the second overflows where a C long
  -- has 32 bits).
  call('ZREMRANGEBYSCORE', log, '-inf', now - keep)
  return keep, rec_window, rec_until
end

-- retain makes log, which just admitted a request, live as long as the
-- history it keeps (keep µs). When this call's longest window (longest,
-- longest_s its digits) is the one to keep and the record is not its own or
-- ends within a window, it renews the record: that window, kept for two
-- windows, to the Unix ms until_ms; the log then lives until then too.
-- Between renewals the log lives until the record's end, a window from now
-- at least, so it needs no PEXPIRE, but for a log this call made (fresh) or
-- a longer window another caller keeps: then it lives keep from now, or to
-- the record's end if later, so that no writer shortens what the record
-- promises. Under callers' clocks (ARGV[3]) that disagree by d, a log may
-- live d less than a window past an admission, as its counts may be off by
-- d (see WithClock).
local function retain(log, now, keep, longest, longest_s, rec_window, rec_until, fresh)
  if longest >= keep and (rec_window ~= longest or rec_until * 1000 - now < longest) then
    local until_ms = math.ceil((now + 2 * longest) / 1000)
    local life = ms(until_ms * 1000 - now)
    call('SET', log .. ':#keep', longest_s .. ':' .. until_ms, 'PX', life)
    call('PEXPIRE', log, life)
  elseif fresh or keep > longest then
    local d = rec_until * 1000 - now
    if d < keep then
      d = keep
    end
    call('PEXPIRE', log, ms(d))
  end
end

-- one decides the commonest request, which most calls are: one unit
-- under one exact limit of quota q and window w_s (digits), recorded as
-- id in log. It is decide (below) cut to that case: no table but its
-- reply, no limit to parse, and, called alone, none of the stepped log's
-- functions made, for that Lua was most of the script's cost. The replies
-- and writes of both, and of quick above, are the same, and a test
-- holds them to it.
local function one(log, id, clock, q, w_s)
  local now, score = clock_of(clock)
  local w = tonumber(w_s)
  local keep, rec_window, rec_until = retained(log, now, w)
  local c
  if w >= keep then
    c = call('ZCARD', log)
  else
    c = call('ZCOUNT', log, now - w + 1, '+inf')
  end
  if c < q then
    if call('ZADD', log, 'NX', score, id) == 0 then
      -- A retried call, whose unit may have left this window already.
      local reset = 0
      if c > 0 then
        reset = call('ZRANGE', log, -1, -1, 'WITHSCORES')[2] + w - now
      end
      return {1, 1, q - c, 0, reset}
    end
    retain(log, now, keep, w, w_s, rec_window, rec_until, w >= keep and c == 0)
    local reset = w
    if clock ~= '' then
      reset = call('ZRANGE', log, -1, -1, 'WITHSCORES')[2] + w - now
    end
    return {1, 0, q - c - 1, 0, reset}
  end
  return refused(log, id, q, c, w, now)
end

-- is_one reports whether the request whose cost, id, quota and window are
-- ARGV[a..a+1] and ARGV[a+3..a+4] is one's case. It raises no error: a
-- malformed request goes to decide, whose errors a batch isolates.
local function is_one(a)
  local q = tonumber(ARGV[a + 3])
  return ARGV[a] == '1' and ARGV[a + 1] ~= '' and q ~= nil and q > 0
    and not string.find(ARGV[a + 4], ':', 1, true)
end

if #ARGV == 5 and is_one(1) then
  return one(KEYS[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5])
end

-- A stepped log is a string: a header of five little-endian doubles (o, the
-- oldest bucket kept; n, the newest; t, the units in o..n; k and u, the
-- retention record: a window in µs kept until the Unix second u), then a
-- ring of RING unsigned 32-bit counts, big-endian as BITFIELD keeps
-- them, bucket b in slot b % RING. Slots of
-- buckets outside o..n hold 0. RING exceeds the most steps a window may
-- span (MaxSteps, 1,440) by the two buckets a window straddles and slack.
local RING, HDR = 1444, 40

-- ring_read returns the counts of buckets a..b (b - a < RING) of key.
local function ring_read(key, a, b)
  local out = {}
  if b < a then
    return out
  end
  local sa, sb = a % RING, b % RING
  local parts = {sa, sb}
  if sa > sb then
    parts = {sa, RING - 1, 0, sb}
  end
  for i = 1, #parts, 2 do
    local n = parts[i + 1] - parts[i] + 1
    local s = call('GETRANGE', key, HDR + 4 * parts[i], HDR + 4 * parts[i + 1] + 3)
    local got = math.floor(#s / 4)
    if got > 0 then
      local v = {struct.unpack('>' .. string.rep('I4', got), s)}
      for j = 1, got do
        out[#out + 1] = v[j]
      end
    end
    for _ = got + 1, n do
      out[#out + 1] = 0
    end
  end
  return out
end

-- ring_zero zeroes the slots of buckets a..b of key.
local function ring_zero(key, a, b)
  if b - a + 1 >= RING then
    call('SETRANGE', key, HDR, string.rep('\0', 4 * RING))
    return
  end
  local sa, sb = a % RING, b % RING
  if sa <= sb then
    call('SETRANGE', key, HDR + 4 * sa, string.rep('\0', 4 * (sb - sa + 1)))
  else
    call('SETRANGE', key, HDR + 4 * sa, string.rep('\0', 4 * (RING - sa)))
    call('SETRANGE', key, HDR, string.rep('\0', 4 * (sb + 1)))
  end
end

-- stepped_state reads stepped log g, evicts the buckets older than its
-- kept history, and fills in g's fields: keep, o, n, t, k, u, and b, the
-- bucket an admission now goes to.
local function stepped_state(g, now)
  local o, n, t, k, u = 0, 0, 0, 0, 0
  local h = call('GETRANGE', g.key, 0, HDR - 1)
  if #h == HDR then
    o, n, t, k, u = struct.unpack('<ddddd', h)
  end
  g.new = #h < HDR
  local keep = g.longest
  if k > keep and u * 1000000 > now then
    keep = k
  end
  local S = g.step
  local first = math.floor((now - keep) / S) -- the oldest bucket still counted
  if t > 0 and o < first then
    if n < first then
      ring_zero(g.key, o, n) -- everything left the kept history
      t = 0
    else
      for _, c in ipairs(ring_read(g.key, o, first - 1)) do
        t = t - c
      end
      ring_zero(g.key, o, first - 1)
      o = first
    end
    call('SETRANGE', g.key, 0, struct.pack('<ddddd', o, n, t, k, u))
  end
  -- An admission goes to the bucket of now, or to the newest if another
  -- clock ran ahead: later, so never too early out of any window.
  local b = math.floor(now / S)
  if t > 0 and b < n then
    b = n
  end
  g.keep, g.o, g.n, g.t, g.k, g.u, g.b = keep, o, n, t, k, u, b
end

-- counts returns the counts of stepped log g's buckets from..g.n.
local function counts(g, from)
  if g.t == 0 then
    return {}
  end
  return ring_read(g.key, math.max(from, g.o), g.n)
end

-- decide decides one request: its log is KEYS[k0+1], the quota and window
-- of limit i are ARGV[a0+2i] and ARGV[a0+2i+1] for i = 1..n, the limits
-- ending at the first quota of 0.
local function decide(k0, n, cost, id, clock, a0)
  local now, score = clock_of(clock)
  local log = KEYS[k0 + 1]

  -- The limits: quota[i], window[i] and group[i] (nil for the exact log,
  -- else the stepped log of its step), and the longest exact window.
  local m, quota, window, group = 0, {}, {}, {}
  local groups, longest, longest_s = {}, 0, nil
  for i = 1, n do
    local q = tonumber(ARGV[a0 + 2 * i])
    if q == 0 then
      break
    end
    m = i
    local arg = ARGV[a0 + 1 + 2 * i]
    local w, st = string.match(arg, '^(%d+):(%d+)$')
    quota[i] = q
    if w then
      local key = log .. ':#' .. st
      w, st = tonumber(w), tonumber(st)
      local g
      for _, x in ipairs(groups) do
        if x.step == st then
          g = x
        end
      end
      if not g then
        local j = #groups + 1
        g = {step = st, key = key, ids = key .. ':ids', longest = 0, keep = 0, o = 0, n = 0, t = 0, k = 0, u = 0, b = 0, new = false}
        groups[j] = g
      end
      if w > g.longest then
        g.longest = w
      end
      window[i], group[i] = w, g
    else
      w = tonumber(arg)
      window[i] = w
      if w > longest then
        longest, longest_s = w, arg
      end
    end
  end

  -- The exact log keeps this call's longest exact window, or a longer one
  -- another caller enforced lately (the record).
  local keep, rec_window, rec_until = longest, nil, nil
  if longest > 0 then
    keep, rec_window, rec_until = retained(log, now, longest)
  end
  for _, g in ipairs(groups) do
    stepped_state(g, now)
  end

  -- count[i]: the units limit i counts now. A stepped limit counts whole
  -- buckets, from the one its window starts in.
  local count, fits, total = {}, true, nil
  for i = 1, m do
    local g, c = group[i], nil
    if not g then
      if window[i] >= keep then
        total = total or call('ZCARD', log)
        c = total
      else
        c = call('ZCOUNT', log, now - window[i] + 1, '+inf')
      end
    elseif window[i] >= g.keep then
      c = g.t
    else
      c = 0
      for _, x in ipairs(counts(g, math.floor((now - window[i]) / g.step))) do
        c = c + x
      end
    end
    count[i] = c
    if c + cost > quota[i] then
      fits = false
    end
  end

  local out = {0, 0}
  local duplicate = 0
  if fits and id ~= '' then
    -- The first write of the id tells a retried call: the exact log's
    -- members, else the first stepped log's ids.
    local added = 1
    if longest > 0 then
      if cost == 1 then
        added = call('ZADD', log, 'NX', score, id)
      else
        -- Members id, id..1, ..., id..(cost-1), in chunks, so a large
        -- cost never overflows Lua's stack in unpack.
        added = 0
        local args = {'NX'}
        for u = 0, cost - 1 do
          args[#args + 1] = score
          if u == 0 then
            args[#args + 1] = id
          else
            args[#args + 1] = id .. u
          end
          if #args >= 201 or u == cost - 1 then
            added = added + call('ZADD', log, unpack(args))
            args = {'NX'}
          end
        end
      end
    end
    if added ~= 0 then
      for j, g in ipairs(groups) do
        -- Request ids: the identity's 128 most recent admissions at this
        -- step, scored with their bucket; trimmed first, so that the set
        -- never passes 128 and stays a listpack (zset-max-listpack-entries).
        call('ZREMRANGEBYRANK', g.ids, 0, -128)
        local a = call('ZADD', g.ids, 'NX', g.b, id)
        if j == 1 and longest == 0 then
          added = a
          if a == 0 then
            break
          end
        end
      end
    end
    if added == 0 then
      duplicate = 1 -- a retried call: its id was there
    else
      if longest > 0 then
        retain(log, now, keep, longest, longest_s, rec_window, rec_until, total == 0)
      end
      for _, g in ipairs(groups) do
        local b = g.b
        if g.t == 0 then
          g.o, g.n = b, b
        elseif b > g.n then
          g.n = b
        end
        if g.new then
          -- Written whole once, so Redis never grows it (and doubles it).
          call('SETRANGE', g.key, 0, string.rep('\0', HDR + 4 * RING))
        end
        call('BITFIELD', g.key, 'INCRBY', 'u32', '#' .. (HDR / 4 + b % RING), cost)
        g.t = g.t + cost
        -- This call's longest window at this step is the one to keep: say
        -- so for two windows, renewed once a window.
        if g.longest >= g.keep and (g.k ~= g.longest or g.u * 1000000 - now < g.longest) then
          g.k, g.u = g.longest, math.ceil((now + 2 * g.longest) / 1000000)
        end
        call('SETRANGE', g.key, 0, struct.pack('<ddddd', g.o, g.n, g.t, g.k, g.u))
        local life = ms(g.keep + g.step)
        call('PEXPIRE', g.key, life)
        call('PEXPIRE', g.ids, life)
      end
      local newest
      for i = 1, m do
        local j, g = 3 * i, group[i]
        local reset
        if g then
          reset = (g.n + 1) * g.step + window[i] - now
        elseif clock ~= '' then
          newest = newest or call('ZRANGE', log, -1, -1, 'WITHSCORES')[2]
          reset = newest + window[i] - now
        else
          reset = window[i]
        end
        out[j], out[j + 1], out[j + 2] = quota[i] - count[i] - cost, 0, reset
      end
      out[1] = 1
      return out
    end
  end

  -- Not recorded: a denial, a peek or a retried call.
  local allowed = 0
  if fits then
    allowed = 1
  elseif id ~= '' then
    local seen
    if longest > 0 then
      seen = call('ZSCORE', log, id)
    else
      seen = call('ZSCORE', groups[1].ids, id)
    end
    if seen then
      allowed, duplicate = 1, 1
    end
  end
  out[1], out[2] = allowed, duplicate
  local newest
  for i = 1, m do
    local j, g, c, q, w = 3 * i, group[i], count[i], quota[i], window[i]
    local remaining = q - c
    if remaining < 0 then
      remaining = 0
    end
    local retry, reset = 0, 0
    if allowed == 0 and c + cost > q then
      -- This limit admits the cost once the k-th oldest unit it counts
      -- has left its window.
      local k = c + cost - q
      if not g then
        -- Its window holds the newest c members.
        retry = call('ZRANGE', log, k - 1 - c, k - 1 - c, 'WITHSCORES')[2] + w - now
      else
        -- A bucket leaves the window whole, a step after its start.
        local from = math.max(math.floor((now - w) / g.step), g.o)
        for x, units in ipairs(counts(g, from)) do
          k = k - units
          if k <= 0 then
            retry = (from + x) * g.step + w - now
            break
          end
        end
      end
    end
    if c > 0 then
      if g then
        reset = (g.n + 1) * g.step + w - now
      else
        newest = newest or call('ZRANGE', log, -1, -1, 'WITHSCORES')[2]
        reset = newest + w - now
      end
    end
    out[j], out[j + 1], out[j + 2] = remaining, retry, reset
  end
  return out
end

if ARGV[1] ~= '*' then
  return decide(0, (#ARGV - 3) / 2, tonumber(ARGV[1]), ARGV[2], ARGV[3], 2)
end

local replies, k0, a = {}, 0, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local ok, out = true, nil
  if n == 1 then
    ok, out = pcall(quick, KEYS[k0 + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
  end
  if ok and out == nil then
    if n == 1 and is_one(a + 1) then
      ok, out = pcall(one, KEYS[k0 + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4]), ARGV[a + 5])
    else
      ok, out = pcall(decide, k0, n, tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], a + 2)
    end
  end
  if not ok then
    -- Redis's error reply (a table or a string, by Redis version), or
    -- Lua's own error, which gets Redis's generic prefix.
    if type(out) ~= 'table' or not out.err then
      out = tostring(out)
      if not string.match(out, '^%u+ ') then
        out = 'ERR ' .. out
      end
      out = {err = out}
    end
  end
  replies[#replies + 1] = out
  k0, a = k0 + n, a + 4 + 2 * n
end
return replies
