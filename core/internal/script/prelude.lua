-- prelude.lua: what every script of the limiter starts with.
--
-- What costs Redis time in these scripts is less their logic than what
-- they allocate, convert and look up, so they keep all three low: numbers
-- that are constant go to redis.call as strings (Redis formats every Lua
-- number it is given); strings from ARGV become numbers once, and not at
-- all where a comparison will do; a log's state travels in locals and
-- return values rather than tables; and a function is made only when the
-- call needs it, for Redis runs the whole chunk, making every function
-- anew, at every call.
local call = redis.call

-- The logs' functions, which exact.lua, stepped.lua and inflight.lua
-- define: an allow script made for plans of one kind of log leaves the
-- others' files out, and their functions stay nil, never called.
local exact, stepped, stepped_find, stepped_ids
local inflight_read, inflight_finish
