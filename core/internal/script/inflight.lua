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
--
-- Once a lease was released while held, the log keeps its estimate of how
-- long a request holds its place, scored -1 so that no eviction or count
-- of leases meets it: "#h<H>:<D>", in µs, H the hold and D how far a hold
-- strays from it. Each release's hold h (settle.lua) moves them an eighth
-- of the way: H = floor((7H + h) / 8) and D = floor((7D + |h - H|) / 8),
-- H before the move; the first makes H h and D 0. A denial then says when
-- a place is expected to free, no later than the earliest lease's end,
-- from f, the earliest lease's start (its end less the lease this call
-- takes) and H less now, and g = H / quota, the time between releases of
-- quota holders: f if it is still ahead, but no more than g (another
-- holder may free first); if f has passed (the holder is late) but not by
-- D, half of what is left of D, and of g; later still, half of g; each at
-- least a millisecond. With no estimate yet, the earliest lease's end.
-- The estimate lives and dies with the log.

-- inflight_held moves the log key's estimate of a hold by a hold of h µs.
inflight_held = function(key, h)
  local old = call('ZRANGEBYSCORE', key, '-1', '-1')[1]
  local d = 0
  local hr, dr = string.match(old or '', '^#h(%d+):(%d+)$')
  if hr then -- a record this script did not write starts over
    hr, dr = hr + 0, dr + 0
    h, d = math.floor((7 * hr + h) / 8), math.floor((7 * dr + math.abs(h - hr)) / 8)
  end
  local new = string.format('#h%d:%d', h, d)
  if new ~= old then
    call('ZADD', key, '-1', new)
    if old then
      call('ZREM', key, old)
    end
  end
end

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
-- three values: places left, the µs until a place is expected to free if
-- the limit denies (above), and the µs until the last lease ends. Limits
-- come as in exact.lua.
inflight_finish = function(key, now, id, admit, allowed, n, x, nlim, q1, w1, out, o)
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
  if admit then
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
      local first = call('ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2]
      retry = math.max(first - now, 0)
      local h, d = string.match(call('ZRANGEBYSCORE', key, '-1', '-1')[1] or '', '^#h(%d+):(%d+)$')
      if h then -- no estimate, or one this script cannot read: the lease's end
        h, d = h + 0, d + 0
        local f, g = first - lease + h - now, math.floor(h / q)
        if f > 0 then
          retry = math.min(retry, f, math.max(g, 1000))
        elseif f + d > 0 then
          retry = math.min(retry, math.max(math.floor(math.min(f + d, g) / 2), 1000))
        else
          retry = math.min(retry, math.max(math.floor(g / 2), 1000))
        end
      end
    end
    if n > 0 then
      reset = math.max(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] - now, 0)
    end
    out[j], out[j + 1], out[j + 2] = math.max(q - n, 0), retry, reset
  end
end
