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
-- Returns a flat array of integers:
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

local cost = tonumber(ARGV[1])
local id = ARGV[2]
local clock = ARGV[3]

-- Large integers must reach Redis as exact decimals: tostring would round them.
local fmt = string.format

local now, score
if clock == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  score = fmt('%.0f', now)
else
  now = tonumber(clock)
  score = clock
end

local n = #KEYS
local quotas, windows, counts = {}, {}, {}
local fits = true
for i = 1, n do
  local key, quota, window = KEYS[i], tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  quotas[i], windows[i] = quota, window
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%.0f', now - window))
  local count = redis.call('ZCARD', key)
  counts[i] = count
  if count + cost > quota then
    fits = false
  end
end

-- zadd records the request's members in key with NX and returns how many
-- were new: 0 only if the request was recorded before.
local function zadd(key)
  if cost == 1 then
    return redis.call('ZADD', key, 'NX', score, id)
  end
  -- In chunks, so a large cost never overflows Lua's stack in unpack.
  local added, args = 0, {'NX'}
  for j = 0, cost - 1 do
    args[#args + 1] = score
    if j == 0 then
      args[#args + 1] = id
    else
      args[#args + 1] = id .. j
    end
    if #args >= 201 or j == cost - 1 then
      added = added + redis.call('ZADD', key, unpack(args))
      args = {'NX'}
    end
  end
  return added
end

local allowed, duplicate, recorded = 0, 0, false
if fits then
  allowed = 1
  if id ~= '' then
    for i = 1, n do
      if zadd(KEYS[i]) == 0 and i == 1 then
        duplicate = 1 -- a retried call: its members were all there
        break
      end
      redis.call('PEXPIRE', KEYS[i], math.ceil(windows[i] / 1000))
      counts[i] = counts[i] + cost
    end
    recorded = duplicate == 0
  end
elseif id ~= '' and redis.call('ZSCORE', KEYS[1], id) then
  allowed, duplicate = 1, 1
end

local out = {allowed, duplicate}
for i = 1, n do
  local count, quota, window = counts[i], quotas[i], windows[i]
  local remaining = quota - count
  if remaining < 0 then
    remaining = 0
  end
  local retry = 0
  if allowed == 0 and count + cost > quota then
    -- This limit admits the cost once its k-th oldest unit leaves the window.
    local k = count + cost - quota
    local oldest = redis.call('ZRANGE', KEYS[i], k - 1, k - 1, 'WITHSCORES')
    retry = tonumber(oldest[2]) + window - now
  end
  local reset = 0
  if recorded and clock == '' then
    reset = window
  elseif count > 0 then
    local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    reset = tonumber(newest[2]) + window - now
  end
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out
