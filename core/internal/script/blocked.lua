-- blocked.lua: reads how long an identity's block has left (Limiter.Blocked
-- and every Wait before it asks for a decision).
--
-- KEYS[1]  the block key: prefix.."{"..tag.."}:!blocked".
--
-- Returns the block's remaining length in milliseconds, or 0 when no block
-- is in force. (PTTL answers -2 for a missing key, and -1 for a key without
-- an expiry, which block.lua never writes.)

local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  return 0
end
return left
