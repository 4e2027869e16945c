-- exact.lua: the exact log (part of the allow script; decide.lua holds the
-- protocol and decides with these functions).
--
-- The exact log is a sorted set with one member per admitted unit, scored
-- with its admission time in µs: a request of id and cost c records id,
-- id.."1", ..., id..(c-1). Every exact limit counts the members inside its
-- own window, so a request is recorded once whatever the number of limits,
-- and a limit whose quota or window changes counts what was admitted
-- already.
--
-- Below every admission, scored negative so that no eviction by time
-- reaches them, the log keeps its records, which carry their values in
-- their names (reading a name costs Redis less than formatting a score):
--   "#r<W>:<Q>:<E>"  scored -1: W, the longest window counted in the log
--        while it lives, in µs, and Q, the largest quota. The log keeps W
--        of history, so that a caller with a shorter window never evicts
--        what a longer one counts, and at most its newest Q units, which
--        is all that a limit of quota up to Q needs to decide exactly. E
--        is the Unix ms (on the deciders' clock) until which the log
--        lives, in 13 digits at least: it is renewed for two windows once
--        less than one is left, so that an admission needs no PEXPIRE.
--   "#t<T>"  scored -2, once the log dropped units to stay within Q: T is
--        the admission time of the newest unit dropped. A window that
--        still reaches back to T has lost count of them, so it counts as
--        full until T leaves it.
-- A request's members are at most 11 bytes (an 8-byte id and the digits of
-- a unit below 1,000), a record's more, so the two never meet.
--
-- The log's state, which a part of a request of several keeps between
-- reading and writing (exact, below), in this order: grow (this call counts
-- a longer window or a larger quota than the record holds), W, Q, E, T (or
-- false), nrec (how many records the log holds), rec (the record's name,
-- or false) and n (the units in the log).
--
-- Limits come as ARGV pairs from x on, quota then window; q1 and w1 are
-- the first pair converted already, q1 negative for a shadow limit.

-- exact_keep drops the oldest drop units of the log key, whose first nrec
-- members are its records, and records when the newest of them came, T,
-- which it returns.
local function exact_keep(key, drop, nrec)
  local last = call('ZRANGE', key, nrec + drop - 1, nrec + drop - 1, 'WITHSCORES')[2]
  call('ZREMRANGEBYRANK', key, nrec, nrec + drop - 1)
  call('ZREMRANGEBYSCORE', key, '-2', '-2')
  call('ZADD', key, '-2', '#t' .. last)
  return tonumber(last)
end

-- exact decides a request of cost units recorded as id ("" to peek) on
-- the log key, counted by the nlim limits whose pairs start at ARGV[x]
-- (q1 and w1 the first pair's quota and window, converted already), at
-- now (score its decimal form; newest is now if the clock is Redis TIME,
-- so that an admission is the log's newest unit, else false). It evicts
-- what left the history the log keeps, counts each limit, records the
-- units if the request is admitted, writes the record when the log's state
-- calls for it (unless id is "", a peek), keeps the newest Q units, and
-- puts each limit's three values in out from out[o] on, three places
-- apart: remaining units, the µs until it admits cost units (0 if it does
-- now) and the µs until its window is empty.
--
-- Called alone (part nil) it decides the request by these limits: it is
-- admitted when they all have room, and is a retried call when its id is
-- in the log already. It returns whether the request is admitted, and
-- whether it was a retried call.
--
-- A part of a request of several (decide.lua) calls it twice with one
-- table, part. The first call, with part.admit nil, reads: it evicts, puts
-- each limit's count in out, keeps the log's state in part and returns.
-- The second, once part.admit (record the request) and part.allowed (it
-- is admitted, now or before) are set for the whole request, writes and
-- fills in out.
--
-- One function for both, and the state in locals, for the lone request of
-- one exact part is the commonest of all, and every call, argument and
-- table costs Redis more than the rest of its Lua.
exact = function(key, cost, id, now, score, newest, x, nlim, q1, w1, out, o, part)
  local grow, w, q, e, t, nrec, rec, n = false, 0, 0, 0, false, 0, false, 0
  local admit, allowed, duplicate = false, false, false
  if part and part.admit ~= nil then
    grow, w, q, e, t, nrec, rec, n = part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8]
    admit, allowed = part.admit, part.allowed
  else
    local m = call('ZRANGE', key, '0', '0')[1]
    -- The commonest record is the one this very limit wrote: read its E in
    -- place, with no string made of W and Q; then W and Q are this limit's.
    local mine = nlim == 1 and q1 > 0 and '#r' .. ARGV[x + 1] .. ':' .. ARGV[x] .. ':'
    if m and mine and string.find(m, mine, 1, true) == 1 then
      w, q, e, nrec, rec = w1, q1, string.sub(m, #mine + 1) + 0, 1, m
    else
      if m and #m > 11 then
        if string.byte(m, 2) == 116 then -- "#t", then "#r"
          t, nrec, m = tonumber(string.sub(m, 3)), 1, call('ZRANGE', key, '1', '1')[1]
        end
        if m and #m > 11 and string.byte(m, 2) == 114 then -- "#r"
          local wr, qr, er = string.match(m, '^#r(%d+):(%d+):(%d+)$')
          w, q, e, nrec, rec = tonumber(wr), tonumber(qr), tonumber(er), nrec + 1, m
        end
      end
      for i = 1, nlim do
        local qi, wi = q1, w1
        if i > 1 then
          qi, wi = ARGV[x + 2 * i - 2] + 0, ARGV[x + 2 * i - 1] + 0
        end
        if qi < 0 then
          qi = -qi
        end
        if wi > w then
          grow, w = true, wi
        end
        if qi > q then
          grow, q = true, qi
        end
      end
    end
    call('ZREMRANGEBYSCORE', key, '0', string.format('%d', now - w))
    if t and t <= now - w then
      call('ZREMRANGEBYSCORE', key, '-2', '-2')
      nrec, t = nrec - 1, false
    end
    n = call('ZCARD', key) - nrec
    local fits = true
    for i = 1, nlim do
      local qi, wi = q1, w1
      if i > 1 then
        qi, wi = ARGV[x + 2 * i - 2] + 0, ARGV[x + 2 * i - 1] + 0
      end
      local c = n
      if wi < w then
        c = call('ZCOUNT', key, now - wi + 1, '+inf')
      end
      if t and t > now - wi and c < math.abs(qi) then
        c = math.abs(qi)
      end
      out[o + 3 * i - 3] = c
      if qi > 0 and c + cost > qi then -- a shadow's quota is negative
        fits = false
      end
    end
    if part then
      part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8] = grow, w, q, e, t, nrec, rec, n
      return
    end
    duplicate = id ~= '' and not fits and call('ZSCORE', key, id) ~= false
    allowed, admit = fits or duplicate, fits and id ~= ''
  end

  local added, last = 0, admit and newest
  if admit then
    added = call('ZADD', key, 'NX', score, id)
    if added == 0 then
      -- Its id was there (a part's is looked for before): a retried call,
      -- for which nothing is added. Decide it as one.
      exact(key, cost, '', now, score, newest, x, nlim, q1, w1, out, o)
      return true, true
    end
    if cost > 1 then
      -- In chunks, so that a large cost never overflows Lua's stack.
      local args = {'NX'}
      for u = 1, cost - 1 do
        args[#args + 1] = score
        args[#args + 1] = id .. u
        if #args >= 201 or u == cost - 1 then
          added = added + call('ZADD', key, unpack(args))
          args = {'NX'}
        end
      end
    end
  end
  if id ~= '' and (grow or admit and e * 1000 - now < w) then
    -- The log lives two windows from now.
    local life = 2 * math.ceil(w / 1000)
    if rec then
      call('ZREM', key, rec)
    end
    call('ZADD', key, '-1', string.format('#r%d:%d:%013d', w, q, math.floor(now / 1000) + life))
    call('PEXPIRE', key, life)
    nrec = t and 2 or 1
  end
  if n + added > q then
    t = exact_keep(key, n + added - q, nrec)
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
      -- The limit admits cost units once only q - cost of the units its
      -- window holds are left: once the (q-cost+1)-th newest has left, and
      -- what the log dropped too.
      local k, real = qi - cost + 1, c
      if t and t > now - wi then
        retry, real = t + wi - now, call('ZCOUNT', key, now - wi + 1, '+inf')
      end
      if k < 1 then
        -- More than the quota: a shadow limit, which never admits it;
        -- say a whole window.
        retry = wi
      elseif real >= k then
        local left = call('ZRANGE', key, -k, -k, 'WITHSCORES')[2] + wi - now
        if left > retry then
          retry = left
        end
      end
    end
    if c > 0 then
      last = last or tonumber(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
      reset = last + wi - now
      if t and t + wi - now > reset then
        reset = t + wi - now
      end
      if reset < 0 then
        reset = 0
      end
    end
    if c > qi then
      c = qi
    end
    out[j], out[j + 1], out[j + 2] = qi - c, retry, reset
  end
  return allowed, duplicate
end
