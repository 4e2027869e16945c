-- decide.lua: decides requests under one or more limits (the allow script:
-- prelude.lua, for plans with a stepped limit stepped.lua, then this file).
--
-- A request is decided on its parts: each part is one key of the
-- identity, its exact log or the stepped log of one step, counted by some
-- of the request's limits. Every key a request touches is one of its KEYS,
-- and they share one {hash tag}, so Redis Cluster runs the script on one
-- slot, and a slot in migration answers TRYAGAIN or ASK before anything is
-- written.
--
-- KEYS[i]      the i-th part's key: an exact log or a stepped log.
-- ARGV[1]      cost: how many units the request takes (1 <= cost).
-- ARGV[2]      request id (8 bytes), or "" to peek: decide, record nothing.
-- ARGV[3]      now in µs as a decimal string, or "" to read Redis TIME.
-- then, for each part in KEYS order:
--   step       0 for an exact log, the step in µs for a stepped log, -1
--              for an in-flight log (inflight.lua)
--   n          how many limits count the part; written negative for a part
--              that counts requests, one each, rather than their cost (an
--              in-flight log always does)
--   n pairs    quota, window in µs
-- A limit whose quota is written negative is a shadow limit: it is
-- counted and reported like the others but never denies.
--
-- A request is admitted when every limit but the shadows has cost units
-- left in its window, and then recorded in every part; a denied request, a
-- peek and a retried call (its id is in a part already) record nothing. A
-- decision may still evict what left the history a log keeps, and write a
-- log's records (the history it keeps) when the request counts a longer
-- window or a larger quota than they hold.
--
-- The batch form: ARGV[1] is "*", then for each request its number of
-- parts, then its ARGV as above; KEYS hold every request's keys in order.
-- The requests are decided one after another under one TIME, each with
-- its own reply, or its own error reply (a key holding another type fails
-- its own request only).
--
-- A request's reply is a flat array of integers:
--   [1]        1 if the request is admitted (or was admitted before), else 0
--   [2]        1 if the id was recorded already: a retried call, which
--              added nothing, else 0
--   then for each limit, in the order of ARGV, three values:
--     remaining       units left in its window after this decision
--     retry_after_us  µs until this limit alone would admit the cost (0 if
--                     it does now)
--     reset_after_us  µs until its window holds no units
--
-- Time: Redis TIME by default, so every application server shares one
-- clock; a score is the time in µs.
--
-- exact.lua and stepped.lua describe the two logs and hold their
-- functions: each reads its log (evicting what left the history it keeps)
-- and counts its limits, then writes an admission, then turns the counts
-- into the reply. A decision reads every part before it writes any, so
-- that a request admitted nowhere is written nowhere.

-- Redis TIME, read once a call and shared by a batch's requests: now in µs
-- and the score as a decimal string.
local time_now, time_score
if ARGV[1] == '*' or ARGV[3] == '' then
  local t = call('TIME')
  local us = t[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  time_score = t[1] .. us
  time_now = tonumber(time_score)
end

-- decide_exact decides a request of cost units recorded as id at clock
-- (ARGV[3]'s form) on one exact log, key, counted by the nlim limits
-- whose pairs start at ARGV[x]: decide (below) with the log's state in
-- locals rather than a table, for this is the commonest request and a
-- table costs more than the rest of its Lua.
local function decide_exact(key, cost, id, clock, x, nlim)
  local now, score = time_now, time_score
  if clock ~= '' then
    now, score = tonumber(clock), clock
  end
  local q1, w1 = tonumber(ARGV[x]), tonumber(ARGV[x + 1])
  local out = {0, 0, 0, 0, 0}
  local grow, w, q, e, t, nrec, rec, n = exact_read(key, now, x, nlim, q1, w1, out, 3)
  local fits = true
  for i = 1, nlim do
    local qi = q1
    if i > 1 then
      qi = tonumber(ARGV[x + 2 * i - 2])
    end
    if qi > 0 and out[3 * i] + cost > qi then -- a shadow's quota is negative
      fits = false
    end
  end
  local duplicate = id ~= '' and not fits and call('ZSCORE', key, id) ~= false
  local allowed = fits or duplicate
  local admit = fits and id ~= ''
  if exact_finish(key, now, score, clock == '' and now, cost, id, admit, allowed,
      grow, w, q, e, t, nrec, rec, n, x, nlim, q1, w1, out, 3) == 0 and admit then
    -- Its id was there: a retried call. Decide it as one.
    return decide_exact(key, cost, '', clock, x, nlim), true
  end
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out
end

-- A lone request of one exact part: no other function is made.
if ARGV[1] ~= '*' and #KEYS == 1 and ARGV[4] == '0' then
  local cost = 1
  if ARGV[1] ~= '1' then
    cost = tonumber(ARGV[1])
  end
  local nlim = 1
  if ARGV[5] ~= '1' then
    nlim = tonumber(ARGV[5])
    if nlim < 0 then
      nlim, cost = -nlim, 1 -- a part that counts requests
    end
  end
  local out, retried = decide_exact(KEYS[1], cost, ARGV[2], ARGV[3], 6, nlim)
  if retried then
    out[1], out[2] = 1, 1
  end
  return out
end

-- decide_stepped is decide_exact for one stepped log, key, of step.
local function decide_stepped(key, step, cost, id, clock, x, nlim)
  local now = time_now
  if clock ~= '' then
    now = tonumber(clock)
  end
  local q1, w1 = tonumber(ARGV[x]), tonumber(ARGV[x + 1])
  local out = {0, 0, 0, 0, 0}
  local grow, w, e, o, n, t, seq, bk, new = stepped_read(key, step, now, x, nlim, q1, w1, out, 3)
  local fits = true
  for i = 1, nlim do
    local qi = q1
    if i > 1 then
      qi = tonumber(ARGV[x + 2 * i - 2])
    end
    if qi > 0 and out[3 * i] + cost > qi then -- a shadow's quota is negative
      fits = false
    end
  end
  local duplicate = id ~= '' and stepped_find(stepped_ids(key, seq), id) ~= nil
  local allowed = fits or duplicate
  stepped_finish(key, step, now, cost, id, fits and not duplicate and id ~= '', allowed,
    grow, w, e, o, n, t, seq, bk, new, x, nlim, q1, w1, out, 3)
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out
end

-- A lone request of one stepped part.
if ARGV[1] ~= '*' and #KEYS == 1 and ARGV[4] ~= '0' and ARGV[4] ~= '-1' then
  local cost = 1
  if ARGV[1] ~= '1' then
    cost = tonumber(ARGV[1])
  end
  local nlim = tonumber(ARGV[5])
  if nlim < 0 then
    nlim, cost = -nlim, 1 -- a part that counts requests
  end
  return decide_stepped(KEYS[1], tonumber(ARGV[4]), cost, ARGV[2], ARGV[3], 6, nlim)
end
-- decide decides the request whose cost is ARGV[a], then its id, its now
-- and its np parts; its keys follow KEYS[k0]. A request of one exact part
-- goes to decide_exact.
local function decide(k0, np, a)
  local cost, id, clock = 1, ARGV[a + 1], ARGV[a + 2]
  if ARGV[a] ~= '1' then
    cost = tonumber(ARGV[a])
  end
  if np == 1 and ARGV[a + 3] ~= '-1' then
    local nlim = tonumber(ARGV[a + 4])
    if nlim < 0 then
      nlim, cost = -nlim, 1 -- a part that counts requests
    end
    if ARGV[a + 3] ~= '0' then
      return decide_stepped(KEYS[k0 + 1], tonumber(ARGV[a + 3]), cost, id, clock, a + 5, nlim)
    end
    local out, retried = decide_exact(KEYS[k0 + 1], cost, id, clock, a + 5, nlim)
    if retried then
      out[1], out[2] = 1, 1
    end
    return out
  end
  local now, score = time_now, time_score
  if clock ~= '' then
    now, score = tonumber(clock), clock
  end

  -- Read every part: a part is an array of its key, its step, the ARGV
  -- index of its first limit, their number, their place in the reply
  -- (each limit's count stands there until the end), the first limit's
  -- quota and window, the units it counts for the request, then the state
  -- its log's read returned.
  local parts, out, fits, x, o = {}, {0, 0}, true, a + 3, 3
  for j = 1, np do
    local step, nlim = tonumber(ARGV[x]), tonumber(ARGV[x + 1])
    local q1, w1 = tonumber(ARGV[x + 2]), tonumber(ARGV[x + 3])
    local key, units = KEYS[k0 + j], cost
    if nlim < 0 then
      nlim, units = -nlim, 1 -- a part that counts requests
    end
    for _ = 1, 3 * nlim do
      out[#out + 1] = 0
    end
    if step == 0 then
      parts[j] = {key, step, x + 2, nlim, o, q1, w1, units, exact_read(key, now, x + 2, nlim, q1, w1, out, o)}
    elseif step > 0 then
      parts[j] = {key, step, x + 2, nlim, o, q1, w1, units, stepped_read(key, step, now, x + 2, nlim, q1, w1, out, o)}
    else
      units = 1 -- a request is one in flight, whatever its cost
      parts[j] = {key, step, x + 2, nlim, o, q1, w1, units, inflight_read(key, now, nlim, out, o)}
    end
    for i = 1, nlim do
      local q = q1
      if i > 1 then
        q = tonumber(ARGV[x + 2 * i])
      end
      if q > 0 and out[o + 3 * i - 3] + units > q then -- a shadow's quota is negative
        fits = false
      end
    end
    x, o = x + 2 + 2 * nlim, o + 3 * nlim
  end

  -- A retried call: its id is in a part already (in an in-flight log, as
  -- a lease that has not ended).
  local duplicate = false
  if id ~= '' then
    for _, p in ipairs(parts) do
      local step, found = p[2], false
      if step > 0 then
        found = stepped_find(stepped_ids(p[1], p[15]), id)
      else
        found = call('ZSCORE', p[1], id)
        if found and step < 0 then
          found = tonumber(found) > now
        end
      end
      if found then
        duplicate = true
        break
      end
    end
  end
  local allowed = fits or duplicate
  local admit = fits and not duplicate and id ~= ''
  for _, p in ipairs(parts) do
    if p[2] == 0 then
      -- its state: grow, W, Q, E, T, nrec, rec, n at p[9..16]
      exact_finish(p[1], now, score, clock == '' and now, p[8], id, admit, allowed,
        p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[3], p[4], p[6], p[7], out, p[5])
    elseif p[2] > 0 then
      -- its state: grow, W, E, o, n, t, seq, bucket, new at p[9..17]
      stepped_finish(p[1], p[2], now, p[8], id, admit, allowed,
        p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[3], p[4], p[6], p[7], out, p[5])
    else
      -- its state: the leases held, at p[9]
      inflight_finish(p[1], now, id, admit, allowed, p[9], p[3], p[4], p[6], p[7], out, p[5])
    end
  end
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out
end

if ARGV[1] ~= '*' then
  return decide(0, #KEYS, 1)
end

local replies, k0, a = {}, 0, 2
while a <= #ARGV do
  local np = tonumber(ARGV[a])
  local ok, out = pcall(decide, k0, np, a + 1)
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
  -- The next request starts after this one's parts.
  k0, a = k0 + np, a + 4
  for _ = 1, np do
    a = a + 2 + 2 * math.abs(tonumber(ARGV[a + 1]))
  end
end
return replies
