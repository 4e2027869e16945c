-- allow.lua: sliding-window-log admission for one identity under one or more limits.
--
-- KEYS[i]       the sorted set of limit i. All keys share the identity's {hash tag},
--               so Redis Cluster runs the script on one shard. A member is one
--               admitted unit; its score is the admission time in microseconds.
-- ARGV[1]       cost: how many units the request takes (1 <= cost <= every quota).
-- ARGV[2]       request id (8 random bytes), or "" to peek: evaluate, record nothing.
--               A request of cost c records the members id, id.."1", ..., id..(c-1).
-- ARGV[3]       now in microseconds as a decimal string, or "" to read Redis TIME.
-- ARGV[2+2i]    quota of limit i: the most units its window may hold.
-- ARGV[3+2i]    window of limit i in microseconds.
--
-- A batch: ARGV[1] is "*", and the decisions of several requests, each with
-- its own identity and limits, follow one another in one call:
-- KEYS          every request's keys, request after request.
-- ARGV[2..]     for each request: its number of keys n, cost, request id and
--               now (as above), then its n quota and window pairs.
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
-- Writes: only when every limit admits, and then to every key; a denied request
-- leaves each set as it was apart from evicting entries that left the window.
--
-- Cost (every call below is measured in BENCHMARKS.md): per limit one
-- ZREMRANGEBYSCORE and one ZCARD; an admission adds one ZADD NX and one
-- PEXPIRE per limit and nothing else. ZADD NX adding nothing is what reveals a
-- retried call there, so ZSCORE runs only before a denial. An admitted request
-- is the newest member, so its reset time is the window and needs no ZRANGE
-- under Redis TIME; with a caller's clock (ARGV[3]) another server's clock may
-- run ahead, so the newest member is read.
--
-- A batch saves Redis a command, a script call and TIME for every request
-- after its first (measured in BENCHMARKS.md).
--
-- Inside Redis the Lua work costs as much as a Redis call, so the admission
-- path keeps it small: it writes the reply as it admits and returns, without
-- a second pass over the limits; the score is TIME's two strings joined, and
-- the ms of PEXPIRE are the window's digits, so neither is formatted from a
-- number (Redis 7.0 formats numbers with printf's costly floating-point path).

local call = redis.call

-- Redis TIME, read once a call and shared by a batch's requests: now in
-- µs, and the score as a decimal string.
local time_now, time_score

-- decide decides one request: its keys are KEYS[k0+1..k0+n], the quota and
-- window of limit i are ARGV[a0+2i] and ARGV[a0+2i+1].
local function decide(k0, n, cost, id, clock, a0)
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

  -- out is the reply. Until limit i's three values are written, out[3i],
  -- out[3i+1] and out[3i+2] hold its count, quota and window.
  local out = {0, 0, 0, 0, 0}
  local fits = true
  -- Scores are exact integers in µs. The cutoff goes to Redis as a Lua number,
  -- which Redis formats exactly (tostring and string.format's %d would not: the
  -- first rounds, the second overflows where a C long has 32 bits).
  for i = 1, n do
    local key, quota, window = KEYS[k0 + i], tonumber(ARGV[a0 + 2 * i]), tonumber(ARGV[a0 + 1 + 2 * i])
    call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    local count = call('ZCARD', key)
    out[3 * i], out[3 * i + 1], out[3 * i + 2] = count, quota, window
    if count + cost > quota then
      fits = false
    end
  end

  local duplicate = 0
  if fits and id ~= '' then
    for i = 1, n do
      local key, j = KEYS[k0 + i], 3 * i
      local added = 0
      if cost == 1 then
        added = call('ZADD', key, 'NX', score, id)
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
            added = added + call('ZADD', key, unpack(args))
            args = {'NX'}
          end
        end
      end
      if added == 0 and i == 1 then
        duplicate = 1 -- a retried call: its members were all there
        break
      end
      local count, quota, window = out[j] + cost, out[j + 1], out[j + 2]
      local ms -- the window in ms, rounded up
      if window % 1000 == 0 then
        ms = string.sub(ARGV[a0 + 1 + 2 * i], 1, -4)
      else
        ms = math.ceil(window / 1000)
      end
      call('PEXPIRE', key, ms)
      local reset = window
      if clock ~= '' then
        reset = call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] + window - now
      end
      out[j], out[j + 1], out[j + 2] = quota - count, 0, reset
    end
    if duplicate == 0 then
      out[1] = 1
      return out
    end
  end

  -- Not recorded: a denial, a peek or a retried call.
  local allowed = 0
  if fits or id ~= '' and call('ZSCORE', KEYS[k0 + 1], id) then
    allowed = 1
    if not fits then
      duplicate = 1
    end
  end
  out[1], out[2] = allowed, duplicate
  for i = 1, n do
    local j, key = 3 * i, KEYS[k0 + i]
    local count, quota, window = out[j], out[j + 1], out[j + 2]
    local remaining = quota - count
    if remaining < 0 then
      remaining = 0
    end
    local retry = 0
    if allowed == 0 and count + cost > quota then
      -- This limit admits the cost once its k-th oldest unit leaves the window.
      local k = count + cost - quota
      retry = call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2] + window - now
    end
    local reset = 0
    if count > 0 then
      reset = call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] + window - now
    end
    out[j], out[j + 1], out[j + 2] = remaining, retry, reset
  end
  return out
end

if ARGV[1] ~= '*' then
  return decide(0, #KEYS, tonumber(ARGV[1]), ARGV[2], ARGV[3], 2)
end

local replies, k0, a = {}, 0, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local ok, out = pcall(decide, k0, n, tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], a + 2)
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
