-- inflight.lua: the in-flight log (part of the allow script; decide.lua
-- holds the protocol and decides with these functions).
--
-- An in-flight log holds the identity's requests in flight: a sorted set
-- of request ids, each scored with the µs at which its lease ends. A
-- request holds its lease from its admission until it is released
-- (settle.lua) or the lease ends, so that a holder that dies frees its
-- place by itself. A request counts 1 here, whatever its cost; a limit's
-- quota is how many may be in flight at once and its window the lease.
-- The log lives as long as its longest lease.
--
-- A lease that ended stays until a decision finds a lease held (its own
-- included), which evicts it, or the log expires: a script never empties
-- the log, for Redis deletes an empty sorted set, and while Redis Cluster
-- migrates the slot, every later command of the script on a key deleted
-- so fails ("non local key").

-- inflight_read puts how many leases are held (end after now) in out for
-- each of the nlim limits, from out[o] on, three places apart, and returns
-- that count.
inflight_read = function(key, now, nlim, out, o)
  local n = call('ZCOUNT', key, now + 1, '+inf')
  for i = 1, nlim do
    out[o + 3 * i - 3] = n
  end
  return n
end

-- inflight_finish takes a lease for id, of the longest window of the nlim
-- limits that are enforced (of the shadow ones if none is, for a shadow
-- never decides what an enforced limit admits), if admit, evicts the
-- leases that ended if one is held, then
-- replaces the count of each limit in out with its
-- three values: places left, the µs until the first lease ends if the
-- limit denies (a release may come sooner), and the µs until the last
-- lease ends. Limits come as in exact.lua.
inflight_finish = function(key, now, id, admit, allowed, n, x, nlim, q1, w1, out, o)
  if admit then
    local lease, shadow = 0, 0
    for i = 1, nlim do
      local q, w = q1, w1
      if i > 1 then
        q, w = tonumber(ARGV[x + 2 * i - 2]), tonumber(ARGV[x + 2 * i - 1])
      end
      if q < 0 then -- a shadow's quota is negative
        shadow = math.max(shadow, w)
      else
        lease = math.max(lease, w)
      end
    end
    if lease == 0 then
      lease = shadow
    end
    call('ZADD', key, now + lease, id)
    -- Never shorter than a longer lease another plan took.
    local life = math.ceil(lease / 1000) + 1
    if call('PTTL', key) < life then
      call('PEXPIRE', key, life)
    end
    n = n + 1
  end
  if n > 0 then
    call('ZREMRANGEBYSCORE', key, '0', now)
  end
  for i = 1, nlim do
    local q = q1
    if i > 1 then
      q = tonumber(ARGV[x + 2 * i - 2])
    end
    local shadow = q < 0
    if shadow then
      q = -q
    end
    local j, retry, reset = o + 3 * i - 3, 0, 0
    local held = n
    if admit then
      held = n - 1
    end
    if held + 1 > q and (shadow or not allowed) then -- this limit alone would deny
      retry = math.max(call('ZRANGE', key, '0', '0', 'WITHSCORES')[2] - now, 0)
    end
    if n > 0 then
      reset = math.max(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] - now, 0)
    end
    out[j], out[j + 1], out[j + 2] = math.max(q - n, 0), retry, reset
  end
end
