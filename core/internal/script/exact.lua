-- exact.lua: the exact log (part of the allow script; decide.lua holds the
-- protocol and decides with these functions; settle.lua corrects).
--
-- The exact log is a sorted set with one member per admitted request,
-- whatever its cost: the request's 8-byte id, scored with its admission
-- time in µs. A request of a cost other than 1 (0 after a settle to
-- nothing, up to the quota) has a second member, its cost: id .. "$",
-- scored -3 - cost. Every exact limit counts the units of the requests
-- inside its own window, so a request is recorded once whatever the
-- number of limits, and a limit whose quota or window changes counts what
-- was admitted already. A decision's work does not grow with its cost,
-- and a request is found by its id alone, whatever it was settled to.
--
-- Scored negative, so that no eviction by time reaches them, the log keeps
-- its costs (above) and its records, which carry their values in their
-- names (reading a name costs Redis less than formatting a score):
--   "#e<W>:<Q>:<E>"  or, once the log holds a request of a cost other than
--   1, "#e<W>:<Q>:<E>:<X>:<H>", scored -1:
--        W: the longest window counted in the log while it lives, in µs,
--        and Q the largest quota. The log keeps W of history, so that a
--        caller with a shorter window never evicts what a longer one
--        counts, and about its newest Q units (whole instants: at least Q,
--        fewer than Q and the requests of its oldest instant), which is
--        all that a limit of quota up to Q needs to decide exactly.
--        E: the Unix ms (on the deciders' clock) until which the log
--        lives, in 13 digits at least: it is renewed for two windows once
--        less than one is left, so that an admission needs no PEXPIRE.
--        X: the units the log holds beyond one a request (the sum of each
--        request's cost less 1; below 0 once requests settled to 0), so
--        that the log's units are its requests and X, at no read of a
--        member. H: how many costs it holds: while there are none, a
--        window's units are its requests, and nothing reads the requests
--        an eviction removes.
--   "#t<T>"  scored -2, once the log dropped requests to stay within Q: T
--        is the admission time of the newest requests dropped. A window
--        that still reaches back to T has lost count of them, so it counts
--        as full until T leaves it.
--
-- The log's state, which a part of a request of several keeps between
-- reading and writing (exact, below), in this order: grow (this call
-- counts a longer window or a larger quota than the record holds), W, Q,
-- E, X, H, T (or false), nrec (how many records the log holds), rec (the
-- record's name, or false) and n (the units in the log).
--
-- Limits come as ARGV pairs from x on, quota then window; q1 and w1 are
-- the first pair converted already, q1 negative for a shadow limit.

-- xh holds the helpers below, which exact_fns makes when a call first
-- needs one: Redis makes every function of the chunk anew at every call
-- (and a value for each local one captures), and the commonest decision
-- needs none of them.
local xh

-- exact_fns makes the helpers.
local function exact_fns()
  xh = {}
  -- xh.record returns the record's name for W, Q, E, X and H.
  xh.record = function(w, q, e, xs, h)
    if h == 0 then
      return string.format('#e%d:%d:%013d', w, q, e)
    end
    return string.format('#e%d:%d:%013d:%d:%d', w, q, e, xs, h)
  end

  -- xh.rewrite replaces the record old (or none) of key with new, which
  -- it returns: new first, so that the key is never left empty, which Redis
  -- would delete with its expiry.
  xh.rewrite = function(key, old, new)
    if new ~= old then
      call('ZADD', key, '-1', new)
      if old then
        call('ZREM', key, old)
      end
    end
    return new
  end

  -- xh.costs returns the costs of the requests ids[from], ids[from+step],
  -- ... of key (step 2 for a reply WITHSCORES), in that order, and the names
  -- of the costs among them.
  xh.costs = function(key, ids, from, step)
    local costs, names = {}, {}
    local i = from
    while i <= #ids do
      local ask = {}
      while i <= #ids and #ask < 500 do
        ask[#ask + 1] = ids[i] .. '$'
        i = i + step
      end
      local got = call('ZMSCORE', key, unpack(ask))
      for j = 1, #ask do
        if got[j] then
          costs[#costs + 1] = -3 - got[j]
          names[#names + 1] = ask[j]
        else
          costs[#costs + 1] = 1
        end
      end
    end
    return costs, names
  end

  -- xh.keep drops the oldest instants of the log key, which holds n
  -- units, its first neg members scored negative (its costs and records):
  -- every request of the oldest instant (one score) while the log keeps at
  -- least q units without them, so that what it keeps does not hang on the
  -- order of ids within an instant. It records when the newest of them came,
  -- and returns that T (false if it dropped nothing) and how X and H
  -- changed.
  xh.keep = function(key, n, q, neg, h)
    local drop, dx, dh, last, gone = 0, 0, 0, false, {}
    -- The instant being read: its score, requests, units, X and H, costs.
    local gs, gm, gu, gx, gh, gn = false, 0, 0, 0, 0, {}
    local from, done = neg, false
    while not done do
      local r = call('ZRANGE', key, from, from + 31, 'WITHSCORES')
      local costs = h > 0 and xh.costs(key, r, 1, 2)
      for j = 1, #r / 2 do
        local c, s = costs and costs[j] or 1, r[2 * j]
        if s ~= gs then
          if gs then
            -- The instant before is whole: it goes if the log keeps q
            -- without it.
            if n - gu < q then
              done = true
              break
            end
            n, drop, last, dx, dh = n - gu, drop + gm, gs, dx + gx, dh + gh
            for _, name in ipairs(gn) do
              gone[#gone + 1] = name
            end
          end
          gs, gm, gu, gx, gh, gn = s, 0, 0, 0, 0, {}
        end
        gm, gu = gm + 1, gu + c
        if c ~= 1 then
          gx, gh, gn[#gn + 1] = gx + c - 1, gh + 1, r[2 * j - 1] .. '$'
        end
      end
      if not done and #r < 64 then
        done = true -- the newest instant: it goes if the log keeps q without it
        if gs and n - gu >= q then
          drop, last, dx, dh = drop + gm, gs, dx + gx, dh + gh
          for _, name in ipairs(gn) do
            gone[#gone + 1] = name
          end
        end
      end
      from = from + 32
    end
    if drop == 0 then
      return false, 0, 0
    end
    call('ZREMRANGEBYRANK', key, neg, neg + drop - 1)
    if #gone > 0 then
      call('ZREM', key, unpack(gone))
    end
    call('ZREMRANGEBYSCORE', key, '-2', '-2')
    call('ZADD', key, '-2', '#t' .. last)
    return tonumber(last), -dx, -dh
  end
end

-- exact decides a request of cost units recorded as id ("" to peek) on
-- the log key, counted by the nlim limits whose pairs start at ARGV[x]
-- (q1 and w1 the first pair's quota and window, converted already), at
-- now (score its decimal form; newest is now if the clock is Redis TIME,
-- so that an admission is the log's newest request, else false). It evicts
-- what left the history the log keeps, counts each limit, records the
-- request if it is admitted, writes the record when the log's state calls
-- for it (a peek, id "", only when an eviction changed X or H), keeps
-- about the newest Q units, and puts each limit's three values in out
-- from out[o] on, three places apart: remaining units, the µs until it
-- admits cost units (0 if it does now) and the µs until its window is
-- empty.
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
  local grow, w, q, e, xs, h, t, nrec, rec, n = false, 0, 0, 0, 0, 0, false, 0, false, 0
  local admit, allowed, duplicate, dirty = false, false, false, false
  -- W and Q as the record holds them: a peek writes the record (when its
  -- eviction changed X or H) with them, for a peek records nothing, not
  -- even a longer window or a larger quota of its own.
  local rw, rq
  if part and part.admit ~= nil then
    grow, w, q, e, xs, h, t, nrec, rec, n = part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10]
    admit, allowed = part.admit, part.allowed
  else
    -- The commonest record is the one this very limit wrote, first of
    -- all (no cost below it, no "#t"): read it in place, with no string
    -- made of W and Q; then W and Q are this limit's. (A cost's name is 9
    -- bytes, shorter than any record's prefix.)
    local m = call('ZRANGE', key, '0', '0')[1]
    local mine = nlim == 1 and q1 > 0 and '#e' .. ARGV[x + 1] .. ':' .. ARGV[x] .. ':'
    if m and mine and string.find(m, mine, 1, true) == 1 then
      w, q, nrec, rec = w1, q1, 1, m
      rw, rq = w, q
      if #m == #mine + 13 then
        e = string.sub(m, #mine + 1) + 0
      else
        local er, xr, hr = string.match(m, '^(%d+):(%-?%d+):(%d+)$', #mine + 1)
        e, xs, h = er + 0, xr + 0, hr + 0
      end
    else
      for _, m in ipairs(call('ZRANGEBYSCORE', key, '-2', '-1')) do
        nrec = nrec + 1
        if string.byte(m, 2) == 116 then -- "#t"
          t = tonumber(string.sub(m, 3))
        else
          local wr, qr, er, xr, hr = string.match(m, '^#e(%d+):(%d+):(%d+):?(%-?%d*):?(%d*)$')
          w, q, e, rec = wr + 0, qr + 0, er + 0, m
          if hr ~= '' then
            xs, h = xr + 0, hr + 0
          end
        end
      end
      rw, rq = w, q
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
    local cut = string.format('%d', now - w)
    if h > 0 then
      -- Requests of other costs may leave: their costs go, and X and H
      -- lose theirs.
      local gone = call('ZRANGEBYSCORE', key, '0', cut)
      if #gone > 0 then
        if not xh then
          exact_fns()
        end
        local costs, names = xh.costs(key, gone, 1, 1)
        for _, c in ipairs(costs) do
          if c ~= 1 then
            xs, h = xs - c + 1, h - 1
          end
        end
        call('ZREMRANGEBYSCORE', key, '0', cut)
        if #names > 0 then
          call('ZREM', key, unpack(names))
          dirty = true
        end
      end
    else
      call('ZREMRANGEBYSCORE', key, '0', cut)
    end
    if t and t <= now - w then
      call('ZREMRANGEBYSCORE', key, '-2', '-2')
      nrec, t = nrec - 1, false
    end
    if dirty and not xh then
      exact_fns()
    end
    if dirty and part then
      -- A part writes its record now, before another part's key is read,
      -- so that nothing can fail between the eviction and the record;
      -- alone, it goes with the admission's.
      if id == '' then
        rec, dirty = xh.rewrite(key, rec, xh.record(rw, rq, e, xs, h)), false
      else
        rec, dirty = xh.rewrite(key, rec, xh.record(w, q, e, xs, h)), false
      end
    end
    n = call('ZCARD', key) - nrec - h + xs
    local fits = true
    for i = 1, nlim do
      local qi, wi = q1, w1
      if i > 1 then
        qi, wi = ARGV[x + 2 * i - 2] + 0, ARGV[x + 2 * i - 1] + 0
      end
      local c = n
      if wi < w then
        if h > 0 then
          if not xh then
            exact_fns()
          end
          c = 0
          for _, u in ipairs(xh.costs(key, call('ZRANGEBYSCORE', key, '(' .. string.format('%d', now - wi), '+inf'), 1, 1)) do
            c = c + u
          end
        else
          c = call('ZCOUNT', key, now - wi + 1, '+inf')
        end
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
      part[1], part[2], part[3], part[4], part[5], part[6], part[7], part[8], part[9], part[10] = grow, w, q, e, xs, h, t, nrec, rec, n
      return
    end
    duplicate = id ~= '' and not fits and call('ZSCORE', key, id) ~= false
    allowed, admit = fits or duplicate, fits and id ~= ''
  end

  local last = admit and newest
  if admit then
    if call('ZADD', key, 'NX', score, id) == 0 then
      -- Its id was there (a part's is looked for before): a retried call,
      -- for which nothing is added. Decide it as one, on the record as the
      -- eviction left it.
      if dirty then
        xh.rewrite(key, rec, xh.record(w, q, e, xs, h))
      end
      exact(key, cost, '', now, score, newest, x, nlim, q1, w1, out, o)
      return true, true
    end
    n = n + cost
    if cost ~= 1 then
      call('ZADD', key, string.format('%d', -3 - cost), id .. '$')
      xs, h, dirty = xs + cost - 1, h + 1, true
    end
  end
  local life = false
  if not xh and (grow or dirty or n > q or admit and e * 1000 - now < w) then
    exact_fns()
  end
  if id ~= '' and (grow or admit and e * 1000 - now < w) then
    -- The log lives two windows from now.
    life = 2 * math.ceil(w / 1000)
    e, dirty = math.floor(now / 1000) + life, true
  end
  if id ~= '' and n > q and rec then
    -- Keep about the newest Q units (a new log holds fewer).
    local tt, dx, dh = xh.keep(key, n, q, nrec + h, h)
    if tt then
      t, xs, h, dirty = tt, xs + dx, h + dh, true
    end
  end
  if dirty and id == '' and rw then
    xh.rewrite(key, rec, xh.record(rw, rq, e, xs, h))
  elseif dirty then
    xh.rewrite(key, rec, xh.record(w, q, e, xs, h))
  end
  if life then
    call('PEXPIRE', key, life)
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
      -- window holds are left: once the request holding the
      -- (q-cost+1)-th newest unit has left, and what the log dropped too.
      local k = qi - cost + 1
      local from = '(' .. string.format('%d', now - wi)
      if t and t > now - wi then
        retry = t + wi - now
      end
      if k < 1 then
        -- More than the quota: a shadow limit, which never admits it;
        -- say a whole window.
        retry = wi
      elseif h == 0 then
        local real = c
        if t and t > now - wi then
          real = call('ZCOUNT', key, from, '+inf')
        end
        if real >= k then
          local left = call('ZRANGE', key, -k, -k, 'WITHSCORES')[2] + wi - now
          if left > retry then
            retry = left
          end
        end
      else
        if not xh then
          exact_fns()
        end
        local r = call('ZREVRANGEBYSCORE', key, '+inf', from, 'WITHSCORES')
        for y, u in ipairs(xh.costs(key, r, 1, 2)) do
          k = k - u
          if k <= 0 then
            if r[2 * y] + wi - now > retry then
              retry = r[2 * y] + wi - now
            end
            break
          end
        end
      end
    end
    if c > 0 then
      last = last or tonumber(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
      if last and last >= 0 then
        reset = last + wi - now
      end
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
