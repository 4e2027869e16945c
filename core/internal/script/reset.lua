-- reset.lua: forgets every request of one identity.
--
-- KEYS[i]  the identity's keys: its log and its retention record (one
--          {hash tag}).
-- ARGV     none.
--
-- Returns the number of keys deleted.

return redis.call('DEL', unpack(KEYS))
