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

-- The stepped and the in-flight logs' functions, which stepped.lua and
-- inflight.lua define: the allow script made for plans of exact limits
-- only leaves those files out, and they stay nil, never called.
local stepped_read, stepped_finish, stepped_find, stepped_ids
local inflight_read, inflight_finish
