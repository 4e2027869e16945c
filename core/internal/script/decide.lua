-- decide.lua: decides requests under one or more limits (the allow script:
-- prelude.lua, the files of the logs its plans count, then this file; see
-- script.go for its forms).
--
-- A request is decided on its parts: each part is one key of the
-- identity, its exact log or the stepped log of one step, counted by some
-- of the request's limits. Every key a request touches is one of its KEYS,
-- and they share one {hash tag}, so Redis Cluster runs the script on one
-- slot, and a slot in migration answers TRYAGAIN or ASK before anything is
-- written.
--
-- KEYS         the parts' keys, in order: an exact log's, an in-flight
--              log's, or a stepped log's and then its ids' (stepped.lua).
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
-- keys, then its ARGV as above; KEYS hold every request's keys in order.
-- A request whose ARGV is the one before it but for the id is written "="
-- and its id: it has as many keys, and is decided as that one would be.
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
-- or, for the commonest of all, the short reply: one integer,
--   d * 2^20 + remaining
-- when a request of one part and one limit is admitted, is not a retried
-- call, and that limit admits now (retry 0) with its window full for its
-- window and d µs (reset_after_us = window + d), 0 <= d <= the part's step
-- (0 for an exact log: d is 0 after an admission on Redis TIME; a stepped
-- admission's bucket ends within a step), remaining < 2^20 and d < 2^33.
-- A table of five costs Redis more to make and reply than the rest of such
-- a decision's Lua.
--
-- Time: Redis TIME by default, so every application server shares one
-- clock; a score is the time in µs.
--
-- exact.lua and stepped.lua describe the two logs and hold each its one
-- function, exact and stepped: it reads its log (evicting what left the
-- history it keeps) and counts its limits, then writes an admission, then
-- turns the counts into the reply; alone, it decides a request of one
-- part. A request of several parts reads every part before it writes any,
-- so that a request admitted nowhere is written nowhere.

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
  time_now = t[1] * 1000000 + t[2] -- two short numbers convert faster than one long
end

-- A lone request of one exact or stepped part, the commonest of all, is
-- decided here, before any other function is made: decide below reads its
-- arguments the same way, but making it costs Redis about 3 % of such a
-- decision (scripts/script-cost.sh, SCRIPT_COST_CALLGRIND=1).
if ARGV[1] ~= '*' and (#KEYS == 1 and ARGV[4] == '0' or #KEYS == 2 and ARGV[4] ~= '0' and ARGV[4] ~= '-1') then
  local cost, nlim = 1, 1
  if ARGV[1] ~= '1' then
    cost = ARGV[1] + 0
  end
  if ARGV[5] ~= '1' then
    nlim = ARGV[5] + 0
    if nlim < 0 then
      nlim, cost = -nlim, 1 -- a part that counts requests
    end
  end
  local now, score, newest = time_now, time_score, time_now
  if ARGV[3] ~= '' then
    now, score, newest = ARGV[3] + 0, ARGV[3], false
  end
  local q1, w1, step = ARGV[6] + 0, ARGV[7] + 0, 0
  local out, allowed, duplicate = {0, 0, 0, 0, 0}, false, false
  if ARGV[4] == '0' then
    allowed, duplicate = exact(KEYS[1], cost, ARGV[2], now, score, newest, 6, nlim, q1, w1, out, 3)
  else
    step = ARGV[4] + 0
    allowed, duplicate = stepped(KEYS[1], KEYS[2], step, cost, ARGV[2], now, 6, nlim, q1, w1, out, 3)
  end
  local d = out[5] - w1
  if allowed and not duplicate and nlim == 1 and out[4] == 0 and d >= 0 and d <= step and d < 8589934592 and out[3] < 1048576 then
    return d * 1048576 + out[3] -- the short reply
  end
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out
end

-- decide decides the request of id whose ARGV starts at ARGV[a] (its cost,
-- an id, which a repeat does not share, its now, then its parts) and whose
-- nk keys follow KEYS[k0]. It returns the request's reply and the ARGV
-- index after the request. A request of one exact or stepped part (one key,
-- or a stepped log's two) goes to that log's function alone, one of
-- several parts to decide_parts.
local decide_parts
-- The numbers decide read last for a request of one part, and the ARGV
-- index they start at: a repeat (=) of the request reads none of them
-- again, for converting a string costs Redis more than the rest of
-- reading them.
local read_at, cost1, now1, score1, newest1, nlim1, q11, w11, s1
local function decide(k0, nk, a, id)
  local step = ARGV[a + 3]
  local lone = nk == 1 and step == '0' or nk == 2 and step ~= '0' and step ~= '-1'
  if a ~= read_at or not lone then
    local cost, clock = 1, ARGV[a + 2]
    if ARGV[a] ~= '1' then
      cost = ARGV[a] + 0
    end
    local now, score, newest = time_now, time_score, time_now
    if clock ~= '' then
      now, score, newest = clock + 0, clock, false
    end
    if not lone then
      return decide_parts(k0, nk, a, cost, id, now, score, newest)
    end
    local nlim = 1
    if ARGV[a + 4] ~= '1' then
      nlim = ARGV[a + 4] + 0
      if nlim < 0 then
        nlim, cost = -nlim, 1 -- a part that counts requests
      end
    end
    local s = 0
    if step ~= '0' then
      s = step + 0
    end
    read_at, cost1, now1, score1, newest1, nlim1, q11, w11, s1 = a, cost, now, score, newest, nlim, ARGV[a + 5] + 0, ARGV[a + 6] + 0, s
  end
  local cost, now, score, newest, nlim, q1, w1, s = cost1, now1, score1, newest1, nlim1, q11, w11, s1
  local out, allowed, duplicate = {0, 0, 0, 0, 0}, false, false
  if s == 0 then
    allowed, duplicate = exact(KEYS[k0 + 1], cost, id, now, score, newest, a + 5, nlim, q1, w1, out, 3)
  else
    allowed, duplicate = stepped(KEYS[k0 + 1], KEYS[k0 + 2], s, cost, id, now, a + 5, nlim, q1, w1, out, 3)
  end
  local d = out[5] - w1
  if allowed and not duplicate and nlim == 1 and out[4] == 0 and d >= 0 and d <= s and d < 8589934592 and out[3] < 1048576 then
    return d * 1048576 + out[3], a + 7 -- the short reply
  end
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out, a + 5 + 2 * nlim
end

-- decide_parts is decide for a request of several parts, or of an
-- in-flight part: every part is read before any is written.
decide_parts = function(k0, nk, a, cost, id, now, score, newest)
  -- Read every part: a part is an array of its key, its step, the ARGV
  -- index of its first limit, their number, their place in the reply
  -- (each limit's count stands there until the end), the first limit's
  -- quota and window, the units it counts for the request, then the state
  -- of its log: the table an exact or a stepped log's function keeps it
  -- in, or the leases held in an in-flight log; and a stepped log's ids.
  local parts, out, fits, x, o, k = {}, {0, 0}, true, a + 3, 3, k0
  while k < k0 + nk do
    local step, nlim = ARGV[x] + 0, ARGV[x + 1] + 0
    local q1, w1 = ARGV[x + 2] + 0, ARGV[x + 3] + 0
    local key, units = KEYS[k + 1], cost
    k = k + 1
    if nlim < 0 then
      nlim, units = -nlim, 1 -- a part that counts requests
    end
    for _ = 1, 3 * nlim do
      out[#out + 1] = 0
    end
    if step == 0 then
      local st = {}
      exact(key, units, id, now, score, newest, x + 2, nlim, q1, w1, out, o, st)
      parts[#parts + 1] = {key, step, x + 2, nlim, o, q1, w1, units, st}
    elseif step > 0 then
      local st, ids = {}, KEYS[k + 1]
      k = k + 1
      stepped(key, ids, step, units, id, now, x + 2, nlim, q1, w1, out, o, st)
      parts[#parts + 1] = {key, step, x + 2, nlim, o, q1, w1, units, st, ids}
    else
      units = 1 -- a request is one in flight, whatever its cost
      parts[#parts + 1] = {key, step, x + 2, nlim, o, q1, w1, units, inflight_read(key, now, nlim, out, o)}
    end
    for i = 1, nlim do
      local q = q1
      if i > 1 then
        q = ARGV[x + 2 * i] + 0
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
        found = p[9].seen
      elseif step == 0 then
        found = call('ZSCORE', p[1], id)
      else
        found = call('ZSCORE', p[1], id)
        found = found and tonumber(found) > now
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
      p[9].admit, p[9].allowed = admit, allowed
      exact(p[1], p[8], id, now, score, newest, p[3], p[4], p[6], p[7], out, p[5], p[9])
    elseif p[2] > 0 then
      p[9].admit, p[9].allowed = admit, allowed
      stepped(p[1], p[10], p[2], p[8], id, now, p[3], p[4], p[6], p[7], out, p[5], p[9])
    else
      -- its state: the leases held, at p[9]
      inflight_finish(p[1], now, id, admit, allowed, p[9], p[3], p[4], p[6], p[7], out, p[5])
    end
  end
  out[1], out[2] = allowed and 1 or 0, duplicate and 1 or 0
  return out, x
end

if ARGV[1] ~= '*' then
  return (decide(0, #KEYS, 1, ARGV[2]))
end

local replies, k0, a = {}, 0, 2
local np, from -- the last request written whole: its keys, its ARGV
while a <= #ARGV do
  local ok, out, after
  if ARGV[a] == '=' then
    ok, out = pcall(decide, k0, np, from, ARGV[a + 1])
    after = a + 2
  else
    np, from = ARGV[a] + 0, a + 1
    ok, out, after = pcall(decide, k0, np, from, ARGV[a + 2])
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
    -- The next request starts after this one's parts (a stepped one has
    -- two keys).
    after = a + 2
    if ARGV[a] ~= '=' then
      after = a + 4
      local k = 0
      while k < np do
        local step = ARGV[after]
        after, k = after + 2 + 2 * math.abs(ARGV[after + 1] + 0), k + 1
        if step ~= '0' and step ~= '-1' then
          k = k + 1
        end
      end
    end
  end
  replies[#replies + 1] = out
  k0, a = k0 + np, after
end
return replies
