-- settle.lua: corrects what one admitted request recorded: its cost, at
-- the time it was admitted, and its leases in flight (prelude.lua,
-- exact.lua, stepped.lua and inflight.lua come first and describe the
-- logs). A refund settles to 0 and releases. Settling twice to the same
-- cost changes nothing the second time, so a settle may be retried.
--
-- KEYS         the parts the request was decided on, as the allow script
--              took them (a stepped log's key, then its ids').
-- ARGV[1]      the request id.
-- ARGV[2]      the cost recorded for it when admitted (or last settled);
--              or "lo:hi" when a settle whose reply was lost may have run,
--              and the logs may hold any of lo to hi units of it.
-- ARGV[3]      the cost to settle to, or "" to leave it.
-- ARGV[4]      its leases: "" to leave them, "0" to release them, else the
--              µs to renew them for, from now.
-- ARGV[5]      now in µs, or "" for Redis TIME (for a renewal, a release,
--              and the life of a log whose units move later).
-- ARGV[6]      µs to move the request's units later by, or "" (or 0) to
--              leave them: for a request that reached its destination that
--              long after its admission, so that the logs count it when its
--              destination did. A stepped log moves them by whole steps,
--              rounded up, to no later than the step after now's (ARGV[5]
--              or TIME).
-- ARGV[7]      when the request was admitted, in µs (on the clock of
--              ARGV[5], as the caller knows it): a stepped log that no
--              longer holds its id judges by it whether it forgot the id
--              for its age while its units still count.
-- ARGV[8]      the cost the request was admitted for, which a stepped log
--              holds it at unless it keeps another (stepped.lua).
-- ARGV[8+i]    the i-th part's step: 0 for an exact log, above 0 for a
--              stepped log, -1 for an in-flight log; followed by "r" for a
--              log that counts requests, one each, rather than their cost,
--              and for an in-flight log by ":" and the lease its request
--              took, in µs.
--
-- A release of a lease still held tells the in-flight log how long it was
-- held: now less its start, the lease's end less the lease (its last
-- renewal, if renewed), which goes into the log's estimate of a hold
-- (inflight.lua).
--
-- A settle lands on the cost it names, whatever the log held of lo to hi.
-- A settle to fewer units gives the rest back; to more, it records the
-- excess at the admission's time, so that a window may hold more than its
-- quota until the excess leaves it. A settle to 0 forgets the id, as a
-- refund: a retry of it is a new request. Its work does not grow with the
-- correction.
--
-- Returns {units, leases, missed}: the units the first exact or stepped
-- part held for id before (0 when the request left it or was refunded),
-- how many leases of id were held before, and how many stepped parts no
-- longer held id past their horizon (stepped.lua) while its units still
-- count there: the settlement could not correct them.

local id, lease = ARGV[1], ARGV[4]
local shift = tonumber(ARGV[6]) or 0
local units, leases, missed, first = 0, 0, 0, true

-- clock returns now in µs: ARGV[5], the deciders' clock the scores and
-- buckets are on, or Redis TIME.
local function clock()
  if ARGV[5] ~= '' then
    return tonumber(ARGV[5])
  end
  local t = call('TIME')
  return t[1] * 1000000 + t[2]
end

-- live makes key live at least ms from now.
local function live(key, ms)
  if call('PTTL', key) < ms then
    call('PEXPIRE', key, ms)
  end
end

local admitted, cost0 = tonumber(ARGV[7]), tonumber(ARGV[8])
local k = 0
for i = 9, #ARGV do
  k = k + 1
  local key, spec = KEYS[k], ARGV[i]
  local lo, old = string.match(ARGV[2], '^(%d+):(%d+)$')
  if lo then
    lo, old = tonumber(lo), tonumber(old)
  else
    old = tonumber(ARGV[2])
    lo = old
  end
  local new = tonumber(ARGV[3])
  local c0 = cost0 -- what it was admitted for, here
  if string.byte(spec, -1) == 114 then -- "r": one unit a request, refunded only
    spec, old, lo, c0 = string.sub(spec, 1, -2), 1, 1, 1
    if new ~= 0 then
      new = nil
    end
  end
  local taken = false -- an in-flight part's lease
  if string.byte(spec, 1) == 45 then -- "-1:<lease>"
    spec, taken = string.match(spec, '^(%-1):(%d+)$')
    taken = tonumber(taken)
  end
  local step = tonumber(spec)
  if step == 0 then
    -- The request is its id, and its cost the score of id .. "$" if not 1
    -- (exact.lua): found whatever it was settled to, through any Result.
    local s = call('ZSCORE', key, id)
    local had = 0
    if s then
      had = call('ZSCORE', key, id .. '$')
      had = had and -3 - had or 1
    end
    if s and new and new ~= had then
      -- The request's cost becomes new; a settle to 0 forgets its id. X
      -- (each request's cost less 1) and H (how many costs) follow.
      local dx, dh = new - had, 0
      if new == 0 then
        call('ZREM', key, id)
        dx = 1 - had
      end
      if new > 1 then
        call('ZADD', key, string.format('%d', -3 - new), id .. '$')
        if had == 1 then
          dh = 1
        end
      elseif had ~= 1 then
        call('ZREM', key, id .. '$')
        dh = -1
      end
      if not xh then
        exact_fns()
      end
      local r, rec, nrec = call('ZRANGEBYSCORE', key, '-2', '-1'), nil, 0
      for _, m in ipairs(r) do
        nrec = nrec + 1
        if string.byte(m, 2) == 101 then -- "#e"
          rec = m
        end
      end
      local w, q, e, xs, h = string.match(rec or '', '^#e(%d+):(%d+):(%d+):?(%-?%d*):?(%d*)$')
      if w then
        w, q, e = tonumber(w), tonumber(q), tonumber(e)
        xs, h = (tonumber(xs) or 0) + dx, (tonumber(h) or 0) + dh
        local n = call('ZCARD', key) - nrec - h + xs
        if new > had and n > q then
          -- Keep about the newest Q units.
          local _, kx, kh = xh.keep(key, n, q, nrec + h, h)
          xs, h = xs + kx, h + kh
        end
        xh.rewrite(key, rec, xh.record(w, q, e, xs, h))
      end
    end
    local now_cost = new or had
    if s and shift > 0 and now_cost > 0 then
      -- Later by shift: its score, and the log's life, which its record's
      -- W says.
      local later = s + shift
      call('ZADD', key, 'XX', string.format('%d', later), id)
      local rec = call('ZRANGEBYSCORE', key, '-1', '-1')[1]
      local w = rec and string.match(rec, '^#e(%d+):')
      if w then
        live(key, math.ceil((later + tonumber(w) - clock()) / 1000))
      end
    end
    if first then
      units, first = had, false
    end
  elseif step > 0 then
    -- The request is its id among the log's ids, scored with the µs of
    -- its admission (its bucket's), and its cost the score of id .. "$"
    -- once settled to another than it was admitted for (stepped.lua).

    local ids = KEYS[k + 1]
    k = k + 1
    local h = call('GETRANGE', key, '0', HDR_LAST)
    local o, n, t, w, due, exp, p = 0, 0, 0, 0, 0, 0, 0
    if #h == HDR then
      o, n, t, w, due, exp, p = struct.unpack('<ddddddd', h)
    end
    local s = call('ZSCORE', ids, id)
    local had = 0
    if s then
      had = call('ZSCORE', ids, id .. '$')
      had = had and -3 - had or c0
    elseif t > 0 and admitted then
      -- Not held: forgotten for its age (older than the horizon) while
      -- the history the log counts still holds its bucket?
      local now = clock()
      local b = math.floor(admitted / step)
      if b >= math.max(o, math.floor((now - w) / step)) and now - admitted >= stepped_horizon(w) then
        missed = missed + 1
      end
    end
    if s then
      local b = math.floor(s / step)
      local kept = t > 0 and b >= o and b <= n
      if new and new ~= had and kept then
        -- Bucket b's count: its slot's, or the header's p for the newest.
        local slot = '#' .. (RING0 / 6 + b % RING)
        local delta = new - had
        if b == n then
          delta = math.max(delta, -p)
          p = p + delta
        else
          if delta < 0 then
            delta = -math.min(call('BITFIELD', key, 'GET', 'u48', slot)[1], -delta)
          end
          if delta ~= 0 then
            call('BITFIELD', key, 'INCRBY', 'u48', slot, delta)
          end
        end
        if delta ~= 0 then
          t = t + delta
          call('SETRANGE', key, '0', struct.pack('<ddddddd', o, n, t, w, due, exp, p))
        end
      end
      if new and new ~= had then
        if new == 0 then
          call('ZREM', ids, id, id .. '$')
        elseif new == c0 then
          call('ZREM', ids, id .. '$')
        else
          call('ZADD', ids, string.format('%d', -3 - new), id .. '$')
        end
      end
      local by = math.ceil(shift / step)
      local now_cost = new or had
      local d = b
      if by > 0 and now_cost > 0 and kept then
        -- Later by whole steps, to no later than the step after now's: a
        -- bucket further on could share its slot with one still kept.
        d = math.min(b + by, math.floor(clock() / step) + 1)
      end
      if d > b then
        -- The units move from bucket b to d, each count its slot's or, the
        -- newest's, p.
        local from = '#' .. (RING0 / 6 + b % RING)
        local moved
        if b == n then
          moved = math.min(p, now_cost)
        else
          moved = math.min(call('BITFIELD', key, 'GET', 'u48', from)[1], now_cost)
        end
        if moved > 0 then
          if b == n then
            p = p - moved
          else
            call('BITFIELD', key, 'INCRBY', 'u48', from, -moved)
          end
          if d < n then
            call('BITFIELD', key, 'INCRBY', 'u48', '#' .. (RING0 / 6 + d % RING), moved)
          elseif d == n then
            p = p + moved
          else
            -- d becomes the newest: n's count goes to its slot.
            ring_open(key, n, p, d)
            n, p = d, moved
          end
          call('SETRANGE', key, '0', struct.pack('<ddddddd', o, n, t, w, due, exp, p))
          call('ZADD', ids, 'XX', string.format('%d', d * step), id)
          local life = math.ceil(((d + 1) * step + w - clock()) / 1000)
          live(key, life)
          live(ids, life)
        end
      end
    end
    if first then
      units, first = had, false
    end
  else
    local held = call('ZSCORE', key, id)
    local now
    if held and lease ~= '' and lease ~= '0' then
      now = clock()
      if tonumber(held) <= now then
        -- The lease ended (no decision has evicted it yet): it is not
        -- renewed, and holds no place.
        call('ZREM', key, id)
        held = false
      end
    end
    if held then
      leases = leases + 1
      if lease == '0' then
        now = now or clock()
        if taken and tonumber(held) > now then
          inflight_held(key, math.min(math.max(now - tonumber(held) + taken, 0), taken))
        end
        call('ZREM', key, id)
      elseif lease ~= '' then
        local until_us = now + tonumber(lease)
        call('ZADD', key, 'XX', until_us, id)
        if call('PTTL', key) < math.ceil(tonumber(lease) / 1000) + 1 then
          call('PEXPIRE', key, math.ceil(tonumber(lease) / 1000) + 1)
        end
      end
    end
  end
end
return {units, leases, missed}
