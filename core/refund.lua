-- refund.lua: removes exactly what one admitted request recorded.
--
-- KEYS[1]      the identity's log, where an exact limit recorded the request.
--              The stepped logs are named after it, as in allow.lua:
--              KEYS[1]..":#"..step (a header and a ring of counts) and
--              KEYS[1]..":#"..step..":ids" (request ids scored with the bucket
--              their request went to; the last 128 admissions).
-- ARGV[1]      the request id.
-- ARGV[2]      the request's cost c: its log members are id, id.."1", ...,
--              id..(c-1).
-- ARGV[2+g]    the g-th step of the request's stepped limits, in µs.
--
-- Returns the number of units removed from the first structure the request
-- was recorded in (the log, else the first stepped log): c after a first
-- refund, 0 when the request was refunded already, has left the retained
-- history or, in a stepped log, is older than its last 128 admissions.

local id = ARGV[1]
local cost = tonumber(ARGV[2])
local removed = 0
local members = {}
for j = 0, cost - 1 do
  if j == 0 then
    members[#members + 1] = id
  else
    members[#members + 1] = id .. j
  end
  if #members >= 200 or j == cost - 1 then
    removed = removed + redis.call('ZREM', KEYS[1], unpack(members))
    members = {}
  end
end

local RING, HDR = 1444, 40
for g = 1, #ARGV - 2 do
  local key = KEYS[1] .. ':#' .. ARGV[2 + g]
  local ids = key .. ':ids'
  local b = redis.call('ZSCORE', ids, id)
  if b then
    redis.call('ZREM', ids, id)
    b = tonumber(b)
    local h = redis.call('GETRANGE', key, 0, HDR - 1)
    if #h == HDR then
      local o, n, t, k, u = struct.unpack('<ddddd', h)
      if t > 0 and b >= o and b <= n then
        local slot = '#' .. (HDR / 4 + b % RING)
        local units = redis.call('BITFIELD', key, 'GET', 'u32', slot)[1]
        local take = math.min(units, cost)
        if take > 0 then
          redis.call('BITFIELD', key, 'INCRBY', 'u32', slot, -take)
          redis.call('SETRANGE', key, 0, struct.pack('<ddddd', o, n, t - take, k, u))
        end
        if g == 1 and removed == 0 then
          removed = take
        end
      end
    end
  end
end
return removed
