-- refund.lua: removes exactly the members one admitted request recorded.
--
-- KEYS[i]  the sorted sets the request was recorded in (one {hash tag}).
-- ARGV[1]  the request id.
-- ARGV[2]  the request's cost c: its members are id, id.."1", ..., id..(c-1).
--
-- Returns the number of members removed from KEYS[1]: c after a first refund,
-- 0 when the request was refunded already or has left the window.

local id = ARGV[1]
local cost = tonumber(ARGV[2])
local removed = 0
for i = 1, #KEYS do
  local members = {}
  for j = 0, cost - 1 do
    if j == 0 then
      members[#members + 1] = id
    else
      members[#members + 1] = id .. j
    end
    if #members >= 200 or j == cost - 1 then
      local r = redis.call('ZREM', KEYS[i], unpack(members))
      if i == 1 then
        removed = removed + r
      end
      members = {}
    end
  end
end
return removed
