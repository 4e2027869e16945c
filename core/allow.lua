-- allow.lua: sliding-window-log admission for one identity under one or more
-- limits, all counted from one log.
--
-- KEYS[1]       the identity's log: a sorted set with one member per admitted
--               unit, scored with its admission time in µs. Every limit counts
--               the members inside its own window, so a request is recorded
--               once whatever the number of limits, and a limit whose quota or
--               window changes counts what was admitted already.
-- KEYS[2]       the identity's retention record, a string "window_us:until_s":
--               some caller enforced a limit of that window, the longest, and
--               the log keeps that much history until the Unix second until_s.
--               Without it a caller with a short window would evict what
--               another caller's longer window still counts. Optional: without
--               KEYS[2] the log keeps only this call's longest window.
--               Both keys share the identity's {hash tag}, so Redis Cluster
--               runs the script on one shard.
-- ARGV[1]       cost: how many units the request takes (1 <= cost <= every quota).
-- ARGV[2]       request id (8 random bytes), or "" to peek: evaluate, record nothing.
--               A request of cost c records the members id, id.."1", ..., id..(c-1).
-- ARGV[3]       now in microseconds as a decimal string, or "" to read Redis TIME.
-- ARGV[2+2i]    quota of limit i: the most units its window may hold. A quota of
--               0 ends the list of limits (padding; see the batch form).
-- ARGV[3+2i]    window of limit i in microseconds.
--
-- A batch: ARGV[1] is "*", and the decisions of several requests, each with
-- its own identity and limits, follow one another in one call:
-- KEYS          every request's keys, request after request.
-- ARGV[2..]     for each request: its number of keys n, cost, request id and
--               now (as above), then n quota and window pairs: the log, the
--               record and then the log again once per further limit, and
--               pairs with quota 0 after the last limit, so that keys and
--               pairs have one count (the limiter's own connections build
--               them so).
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
-- Writes: only when every limit admits, and then one set of members to the
-- log; a denied request leaves the log as it was apart from evicting entries
-- older than the retained history.
--
-- Cost (measured in BENCHMARKS.md): one GET of the record, one
-- ZREMRANGEBYSCORE, and per limit one ZCARD (the longest window) or ZCOUNT
-- (a shorter one); an admission adds one ZADD NX, one PEXPIRE, and once a
-- window one SET of the record. ZADD NX adding nothing is what reveals a
-- retried call there, so ZSCORE runs only before a denial. An admitted request
-- is the newest member, so its reset time is the window and needs no ZRANGE
-- under Redis TIME; with a caller's clock (ARGV[3]) another server's clock may
-- run ahead, so the newest member is read.

local call = redis.call

-- Redis TIME, read once a call and shared by a batch's requests: now in
-- µs, and the score as a decimal string.
local time_now, time_score

-- decide decides one request: its nk keys are KEYS[k0+1..k0+nk], the
-- quota and window of limit i are ARGV[a0+2i] and ARGV[a0+2i+1] for
-- i = 1..n, the limits ending at the first quota of 0.
local function decide(k0, nk, n, cost, id, clock, a0)
  local now, score
  if clock == '' then
    if not time_now then
      local t = call('TIME')
      local s, us = t[1], t[2]
      time_now = s * 1000000 + us
      -- Seconds, then the µs padded to six digits.
      if #us < 6 then
        us = string.rep('0', 6 - #us) .. us
      end
      time_score = s .. us
    end
    now, score = time_now, time_score
  else
    now, score = tonumber(clock), clock
  end
  local log, record = KEYS[k0 + 1], nil
  if nk >= 2 then
    record = KEYS[k0 + 2]
  end

  -- The limits, and the longest window among them (and its ARGV index).
  local m, longest, li = 0, 0, 0
  for i = 1, n do
    local quota = tonumber(ARGV[a0 + 2 * i])
    if quota == 0 then
      break
    end
    m = i
    local window = tonumber(ARGV[a0 + 1 + 2 * i])
    if window > longest then
      longest, li = window, a0 + 1 + 2 * i
    end
  end

  -- keep is how much history the log retains: this call's longest window,
  -- or a longer one another caller enforced lately.
  local keep, keep_s, rec_window, rec_until = longest, ARGV[li], nil, nil
  if record then
    local r = call('GET', record)
    if r then
      local w, u = string.match(r, '^(%d+):(%d+)$')
      rec_window, rec_until = tonumber(w), tonumber(u)
      if rec_window > keep and rec_until * 1000000 > now then
        keep, keep_s = rec_window, w
      end
    end
  end
  -- Scores are exact integers in µs. The cutoffs go to Redis as Lua numbers,
  -- which Redis formats exactly (tostring and string.format's %d would not: the
  -- first rounds, the second overflows where a C long has 32 bits).
  call('ZREMRANGEBYSCORE', log, '-inf', now - keep)

  -- out is the reply. Until limit i's three values are written, out[3i],
  -- out[3i+1] and out[3i+2] hold its count, quota and window.
  local out = {0, 0}
  local fits, total = true, nil
  for i = 1, m do
    local quota, window = tonumber(ARGV[a0 + 2 * i]), tonumber(ARGV[a0 + 1 + 2 * i])
    local count
    if window >= keep then
      total = total or call('ZCARD', log)
      count = total
    else
      count = call('ZCOUNT', log, now - window + 1, '+inf')
    end
    out[3 * i], out[3 * i + 1], out[3 * i + 2] = count, quota, window
    if count + cost > quota then
      fits = false
    end
  end

  local duplicate = 0
  if fits and id ~= '' then
    local added = 0
    if cost == 1 then
      added = call('ZADD', log, 'NX', score, id)
    else
      -- Members id, id..1, ..., id..(cost-1), in chunks, so a large cost
      -- never overflows Lua's stack in unpack.
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
    if added == 0 then
      duplicate = 1 -- a retried call: its members were all there
    else
      -- The key lives as long as the history it must keep: keep in ms,
      -- rounded up (the digits of keep when it is whole ms).
      local ms
      if keep % 1000 == 0 then
        ms = string.sub(keep_s, 1, -4)
      else
        ms = math.ceil(keep / 1000)
      end
      call('PEXPIRE', log, ms)
      -- This call's longest window is the one to keep: say so for two
      -- windows, renewed once a window.
      if record and longest >= keep and (rec_window ~= longest or rec_until * 1000000 - now < longest) then
        local until_s = math.ceil((now + 2 * longest) / 1000000)
        call('SET', record, ARGV[li] .. ':' .. until_s, 'PX', math.ceil(2 * longest / 1000))
      end
      local newest
      for i = 1, m do
        local j = 3 * i
        local count, quota, window = out[j] + cost, out[j + 1], out[j + 2]
        local reset = window
        if clock ~= '' then
          newest = newest or call('ZRANGE', log, -1, -1, 'WITHSCORES')[2]
          reset = newest + window - now
        end
        out[j], out[j + 1], out[j + 2] = quota - count, 0, reset
      end
      out[1] = 1
      return out
    end
  end

  -- Not recorded: a denial, a peek or a retried call.
  local allowed = 0
  if fits or id ~= '' and call('ZSCORE', log, id) then
    allowed = 1
    if not fits then
      duplicate = 1
    end
  end
  out[1], out[2] = allowed, duplicate
  local newest
  for i = 1, m do
    local j = 3 * i
    local count, quota, window = out[j], out[j + 1], out[j + 2]
    local remaining = quota - count
    if remaining < 0 then
      remaining = 0
    end
    local retry = 0
    if allowed == 0 and count + cost > quota then
      -- This limit admits the cost once the k-th oldest unit of its window
      -- leaves it; its window holds the newest count members.
      local k = count + cost - quota
      retry = call('ZRANGE', log, k - 1 - count, k - 1 - count, 'WITHSCORES')[2] + window - now
    end
    local reset = 0
    if count > 0 then
      newest = newest or call('ZRANGE', log, -1, -1, 'WITHSCORES')[2]
      reset = newest + window - now
    end
    out[j], out[j + 1], out[j + 2] = remaining, retry, reset
  end
  return out
end

if ARGV[1] ~= '*' then
  return decide(0, #KEYS, (#ARGV - 3) / 2, tonumber(ARGV[1]), ARGV[2], ARGV[3], 2)
end

local replies, k0, a = {}, 0, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local ok, out = pcall(decide, k0, n, n, tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], a + 2)
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
