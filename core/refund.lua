-- refund.lua: removes exactly the members one admitted request recorded.
--
-- KEYS[1]  the identity's log, where the request was recorded.
-- ARGV[1]  the request id.
-- ARGV[2]  the request's cost c: its members are id, id.."1", ..., id..(c-1).
--
-- Returns the number of members removed: c after a first refund, 0 when the
-- request was refunded already or has left the retained history.

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
return removed
