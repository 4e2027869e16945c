-- block.lua: records that an identity is blocked, for every process sharing
-- the limiter, until a moment the partner named (Limiter.Block). The block
-- is one string key beside the identity's logs, sharing their {hash tag};
-- it expires by itself, by Redis's clock, when the block ends.
--
-- KEYS[1]  the block key: prefix.."{"..tag.."}:!blocked".
-- ARGV[1]  the block's length in milliseconds, at least 1.
--
-- The key's value is the moment the block was recorded, in microseconds of
-- Redis TIME, for operators (and tests) that ask when it began.
--
-- Returns the block's remaining length in milliseconds after the call: a
-- block is only ever lengthened, so a shorter one leaves a longer in force.
-- Time: Redis TIME and key expiry, so every process shares one clock.

local want = tonumber(ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if left < want then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[1], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', want)
  return want
end
return left
