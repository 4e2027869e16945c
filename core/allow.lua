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

local cost = tonumber(ARGV[1])
local id = ARGV[2]

local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end

-- Large integers must reach Redis as exact decimals: tostring would round them.
local function dec(x)
  return string.format('%.0f', x)
end

local n = #KEYS
local quotas, windows, counts = {}, {}, {}
for i = 1, n do
  quotas[i] = tonumber(ARGV[2 + 2 * i])
  windows[i] = tonumber(ARGV[3 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', dec(now - windows[i]))
  counts[i] = redis.call('ZCARD', KEYS[i])
end

local duplicate = 0
if id ~= '' and redis.call('ZSCORE', KEYS[1], id) then
  duplicate = 1
end

local allowed = 1
if duplicate == 0 then
  for i = 1, n do
    if counts[i] + cost > quotas[i] then
      allowed = 0
    end
  end
end

if allowed == 1 and duplicate == 0 and id ~= '' then
  local score = dec(now)
  for i = 1, n do
    -- ZADD in chunks so a large cost never overflows Lua's stack in unpack.
    local args = {}
    for j = 0, cost - 1 do
      args[#args + 1] = score
      if j == 0 then
        args[#args + 1] = id
      else
        args[#args + 1] = id .. j
      end
      if #args >= 200 or j == cost - 1 then
        redis.call('ZADD', KEYS[i], unpack(args))
        args = {}
      end
    end
    redis.call('PEXPIRE', KEYS[i], math.ceil(windows[i] / 1000))
    counts[i] = counts[i] + cost
  end
end

local out = {allowed, duplicate}
for i = 1, n do
  local remaining = quotas[i] - counts[i]
  if remaining < 0 then
    remaining = 0
  end
  local retry = 0
  if allowed == 0 and counts[i] + cost > quotas[i] then
    -- This limit admits the cost once its k-th oldest unit leaves the window.
    local k = counts[i] + cost - quotas[i]
    local oldest = redis.call('ZRANGE', KEYS[i], k - 1, k - 1, 'WITHSCORES')
    retry = tonumber(oldest[2]) + windows[i] - now
  end
  local reset = 0
  local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  if newest[2] then
    reset = tonumber(newest[2]) + windows[i] - now
  end
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out
