-- prelude.lua: what every script of the limiter starts with.
--
-- What costs Redis time in these scripts is less their logic than what
-- they allocate, convert and look up, so they keep all three low (and
-- Redis's Lua hashes every byte of every string a script makes or reads,
-- about ten instructions a byte, so they keep strings short too):
--   * numbers that are constant go to redis.call as strings, and computed
--     ones as string.format('%d', n) (Redis formats a Lua number with
--     "%.17g", at several times the cost; %d takes a C long, 64 bits on
--     every 64-bit build);
--   * strings from ARGV become numbers once, as s + 0 (tonumber converts
--     twice; these strings are the limiter's own digits), and not at all
--     where a comparison will do;
--   * the commonest reply is one integer, not a table (decide.lua);
--   * a log's state travels in locals and return values, not tables;
--   * a function is made only when the call needs it, for Redis runs the
--     whole chunk, making every function anew, at every call.
local call = redis.call

-- The logs' functions, which exact.lua, stepped.lua and inflight.lua
-- define: an allow script made for plans of one kind of log leaves the
-- others' files out, and their functions stay nil, never called.
local exact, stepped, stepped_horizon
local inflight_read, inflight_finish, inflight_held
