package slidelimit

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// allowCmd is one allow command: the allow script for the identity of
// hash tag tag, by EVALSHA, or by EVAL with the whole script when Redis
// does not know it, after ASKING when a slot is being migrated; the same
// KEYS and ARGV as the go-redis path sends.
type allowCmd struct {
	l            *Limiter
	eval, asking bool
	tag          string
	n            int
	id, now      string
}

// append appends the command to b.
func (cmd allowCmd) append(b []byte) []byte {
	l := cmd.l
	if cmd.asking {
		b = appendCommand(b, "ASKING")
	}
	nk := len(l.suffixes)
	b = appendArrayHeader(b, 3+nk+3+2*nk)
	if cmd.eval {
		b = appendBulk(b, "EVAL")
		b = appendBulk(b, allowSource)
	} else {
		b = appendBulk(b, "EVALSHA")
		b = appendBulk(b, allowScript.Hash())
	}
	b = appendBulkInt(b, int64(nk))
	b = cmd.appendKeys(b)
	b = appendBulkInt(b, int64(cmd.n))
	b = appendBulk(b, cmd.id)
	b = appendBulk(b, cmd.now)
	return append(b, l.quotaTail...)
}

// appendKeys appends the command's keys to b.
func (cmd allowCmd) appendKeys(b []byte) []byte {
	l := cmd.l
	for _, s := range l.suffixes {
		b = appendBulkHeader(b, len(l.cfg.prefix)+1+len(cmd.tag)+len(s))
		b = append(b, l.cfg.prefix...)
		b = append(b, '{')
		b = append(b, cmd.tag...)
		b = append(b, s...)
		b = append(b, '\r', '\n')
	}
	return b
}

// appendBatch appends one EVALSHA that decides the allow commands of calls
// in order (allow.lua's batch form): every call's keys, then "*" and, for
// each call, its number of keys, cost, request id, now and limits.
func appendBatch(b []byte, calls []*wcall) []byte {
	keys, args := 0, 1
	for _, c := range calls {
		nk := len(c.cmd.l.suffixes)
		keys += nk
		args += 4 + 2*nk
	}
	b = appendArrayHeader(b, 3+keys+args)
	b = appendBulk(b, "EVALSHA")
	b = appendBulk(b, allowScript.Hash())
	b = appendBulkInt(b, int64(keys))
	for _, c := range calls {
		b = c.cmd.appendKeys(b)
	}
	b = appendBulk(b, "*")
	for _, c := range calls {
		cmd := c.cmd
		b = appendBulkInt(b, int64(len(cmd.l.suffixes)))
		b = appendBulkInt(b, int64(cmd.n))
		b = appendBulk(b, cmd.id)
		b = appendBulk(b, cmd.now)
		b = append(b, cmd.l.quotaTail...)
	}
	return b
}

// evalWire runs the allow script for the identity of hash tag tag over the
// limiter's own connections, and feeds the breaker what Redis's answer
// told. It resends by EVAL what Redis answered NOSCRIPT, follows MOVED
// and ASK, retries CLUSTERDOWN and TRYAGAIN briefly, and sends once more
// on a fresh connection a call whose connection had gone stale.
//
// It returns the call holding the reply, or nil; the caller gives it back
// with l.wire.put once done with the reply.
func (l *Limiter) evalWire(ctx context.Context, tag string, n int, id, now string) (*wcall, error) {
	w := l.wire
	node, err := w.node(ctx, tag)
	if err != nil {
		w.reload.maybe()
		return nil, err
	}
	if w.isClosed() {
		return nil, redis.ErrClosed
	}
	probe, err := l.brk.admit(node.addr)
	if err != nil {
		return nil, err
	}
	c := w.get()
	eval, asking, fresh := false, false, false
	for attempt := 0; ; attempt++ {
		c.timeout = l.cfg.timeout
		var left bool
		left, err = l.sendWire(ctx, node, c, eval, asking, tag, n, id, now)
		asking = false
		if left {
			// The caller left; a connection may still hold c.
			h := healthUnknown
			l.brk.record(node.addr, 0, h, probe)
			return nil, err
		}
		if err == nil {
			break
		}
		switch {
		case isNoScript(err) && !eval:
			eval = true
			continue
		case retryableReply(err) && attempt < len(retryDelays) && c.before(retryDelays[attempt]):
			w.reload.maybe()
			if sleepCtx(ctx, retryDelays[attempt]) == nil {
				continue
			}
		case redirect(err) && attempt < 3:
			w.reload.maybe()
			if addr := redirectAddr(err); addr != "" {
				opt := node.opt
				node = w.nodeAt(addr, opt, false)
				asking = redis.HasErrorPrefix(err, "ASK")
				continue
			}
		case staleConn(err) && !fresh && ctx.Err() == nil:
			fresh = true
			continue
		}
		break
	}
	h := classify(err)
	if ctx.Err() != nil && err != nil {
		h = healthUnknown // the caller's context ended: that says nothing about Redis
	}
	if shouldReload(err) {
		w.reload.maybe()
	}
	l.brk.record(node.addr, c.rt, h, probe)
	return c, err
}

// sendWire sends one allow command for c to node and waits for its reply.
// It reports whether the caller left before the reply (ctx ended).
func (l *Limiter) sendWire(ctx context.Context, node *wnode, c *wcall, eval, asking bool, tag string, n int, id, now string) (bool, error) {
	for tries := 0; ; tries++ {
		cn, rt, err := node.conn(ctx, c.timeout)
		if err != nil {
			c.rt = rt
			return false, err
		}
		c.skip = 0
		if asking {
			c.skip = 1
		}
		role, err := cn.send(c, allowCmd{l: l, eval: eval, asking: asking, tag: tag, n: n, id: id, now: now})
		if err != nil {
			if tries < 2 {
				continue // the connection failed just now: take another
			}
			c.rt = roundTrips.Add(1)
			return false, err
		}
		if err := cn.wait(ctx, c, role); err != nil && c.state.Load() == cGone {
			return true, err
		}
		if c.answered && !isNoScript(c.err) {
			node.counts.scripts.Add(1)
		}
		if c.err != nil && needsNewConn(c.err) {
			// A replica answering for a primary that failed over: the next
			// dial finds the new one.
			cn.fail(c.err)
		}
		return false, c.err
	}
}

// needsNewConn reports whether err says the connection's server is no
// longer the primary.
func needsNewConn(err error) bool {
	return redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "MASTERDOWN")
}

// redirectAddr returns the address of a MOVED or ASK reply.
func redirectAddr(err error) string {
	f := strings.Fields(err.Error())
	if len(f) != 3 {
		return ""
	}
	return f[2]
}

// before reports whether c can wait d and still be sent within its
// deadline.
func (c *wcall) before(d time.Duration) bool {
	return c.deadline == 0 || time.Now().Add(d).UnixNano() < c.deadline
}
