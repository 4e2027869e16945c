package roundtrip

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/script"
)

// retryDelays are the pauses before sending a command again after
// CLUSTERDOWN, within the call's deadline.
var retryDelays = []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond}

// The pauses before sending a command again after TRYAGAIN: the first, then
// twice the last, up to the longest.
const (
	tryAgainFirst   = 10 * time.Millisecond
	tryAgainLongest = 100 * time.Millisecond
)

// tryAgainPause returns the pause before sending a command again after its
// n-th TRYAGAIN in a row (n from 1).
func tryAgainPause(n int) time.Duration {
	if n > 4 { // tryAgainFirst<<4 passes tryAgainLongest
		return tryAgainLongest
	}
	return min(tryAgainFirst<<(n-1), tryAgainLongest)
}

// exec sends batch (see send); resends by EVAL, which also loads the
// script, the calls the node answered NOSCRIPT; retries CLUSTERDOWN
// briefly, and a slot moving (TRYAGAIN, see moving) for as long as each
// call's own deadline leaves time for another attempt; and delivers each outcome, but for the calls
// whose error hold (if not nil) keeps: those it returns, undelivered. It
// reports the silence Redis showed: the longest a call went unanswered, of
// those that failed by a timeout, or 0 if Redis answered any call (on
// Cluster a batch can span a failed and a healthy node).
func (ln *lane) exec(ctx context.Context, batch []*call, rt uint64, delivered *atomic.Int32, hold func(error) bool) (silence time.Duration, held []*call) {
	answered, cluster := false, ln.d.cluster != nil
	pending := batch
	for len(pending) > 0 {
		began := time.Now().UnixNano()
		ln.send(ctx, pending)
		at := time.Now().UnixNano()
		if err := pending[0].err; err == nil || classify(err) == healthOK {
			ln.answered.Store(at)
		}
		var again []*call
		reload := false
		var pause time.Duration
		for _, c := range pending {
			isMoving := moving(c.err, cluster)
			switch {
			case c.err == nil:
				ln.migrations.decided(c)
			case isMoving:
				ln.migrations.tryAgain(c, at)
			}
			if c.state.Load() != sent {
				continue // timed out or left; nothing to deliver
			}
			if !isMoving {
				c.tryAgains = 0
			}
			switch {
			case isNoScript(c.err) && c.evals <= len(retryDelays):
				c.evals++
				c.arm(time.Unix(0, at)) // Redis answered; the call sent again has the whole timeout
				again = append(again, c)
				continue
			case brokenConn(c.err) && !c.resent && beforeDeadline(c, 0):
				// The connection broke after the command may have run: send
				// it once more, whatever the client's own retry policy (newer
				// go-redis versions do not resend a script). Its request id
				// makes sure a request Redis did record is counted once.
				c.resent = true
				again = append(again, c)
				continue
			case isMoving && c.tryAgainWithin(at-began, at):
				// The node answered: Redis Cluster is migrating the slot and
				// the call's keys are split between two nodes, until the
				// migration ends. Nothing ran.
				c.tryAgains++
				again = append(again, c)
				pause = max(pause, tryAgainPause(c.tryAgains))
				reload = reload || redirect(c.err)
				continue
			case isClusterDown(c.err) && c.downs < len(retryDelays) && beforeDeadline(c, retryDelays[c.downs]):
				again = append(again, c)
				pause = max(pause, retryDelays[c.downs])
				c.downs++
				reload = true
				continue
			}
			h := classify(c.err)
			if h == healthFailed && isTimeout(c.err) && ln.migrations.migrating(c, at) {
				// The deadline passed while the call's slot migrated, most
				// likely inside go-redis's own redirects (see migrations).
				c.err, h = errMigrating, healthUnknown
			}
			if h == healthFailed && hold != nil && hold(c.err) {
				held = append(held, c)
				continue
			}
			switch {
			case h == healthFailed && isTimeout(c.err):
				silence = max(silence, time.Duration(at-c.sentAt.Load()))
			case h == healthOK:
				answered = true
			}
			reload = reload || shouldReload(c.err)
			if c.finish(sent, outcome{reply: c.reply, err: c.err, h: h, rt: rt, late: c.late(at)}) {
				delivered.Add(1)
			}
		}
		if reload {
			ln.d.reload.maybe()
		}
		if pause > 0 {
			if err := sleepCtx(ctx, pause); err != nil {
				for _, c := range again {
					h := healthFailed
					if moving(c.err, cluster) {
						h = healthOK // the node answered; the round trip was given up
					}
					if c.finish(sent, outcome{err: c.err, h: h, rt: rt}) {
						delivered.Add(1)
					}
				}
				return quiet(silence, answered), held
			}
		}
		var next []*call
		now := time.Now().UnixNano()
		for _, c := range again {
			if c.state.Load() == sent { // not left during the pause
				c.sentAt.Store(now)
				next = append(next, c)
			}
		}
		pending = next
	}
	return quiet(silence, answered), held
}

// quiet returns silence, or 0 if Redis answered: a round trip that Redis
// partly answered shows no silence.
func quiet(silence time.Duration, answered bool) time.Duration {
	if answered {
		return 0
	}
	return silence
}

// send runs the allow script for every call of batch, by EVAL for a call
// whose last answer was NOSCRIPT and otherwise by EVALSHA, and sets each
// call's reply and error. A lone call is its own command; several go to a
// standalone Redis as one command of the script's batch form, and
// otherwise as a pipeline.
func (ln *lane) send(ctx context.Context, batch []*call) {
	eval := false
	for _, c := range batch {
		eval = eval || isNoScript(c.err)
	}
	switch {
	case len(batch) == 1:
		c := batch[0]
		args := []any(c.cmd)
		if eval {
			args = c.cmd.Eval()
		}
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		_ = ln.d.process(ctx, cmd)
		c.reply, c.err = script.Reply(cmd.Result())
	case ln.d.single:
		// One script call of the batch form per chunk (script.Chunks),
		// several in one pipeline.
		all := make([]script.Command, len(batch))
		for i, c := range batch {
			all[i] = c.cmd
		}
		chunks := script.Chunks(all)
		cmds := make([]*redis.Cmd, len(chunks))
		var err error
		if len(chunks) == 1 {
			cmds[0] = batchCommand(ctx, chunks[0], eval)
			err = ln.d.process(ctx, cmds[0])
		} else {
			pipe := ln.d.pipe()
			for i, chunk := range chunks {
				cmds[i] = batchCommand(ctx, chunk, eval)
				_ = pipe.Process(ctx, cmds[i])
			}
			_, err = pipe.Exec(ctx)
		}
		i := 0
		for k, cmd := range cmds {
			v, cerr := cmd.Result()
			if cerr == nil && v == nil && err != nil {
				cerr = err // no connection: go-redis left the command untouched
			}
			replies, ok := v.([]any)
			if cerr == nil && !ok {
				cerr = fmt.Errorf("allow script: unexpected batch reply %v", v)
			}
			for j := range chunks[k] {
				batch[i].reply, batch[i].err = script.BatchReply(replies, j, cerr)
				i++
			}
		}
	default:
		pipe := ln.d.pipe()
		cmds := make([]*redis.Cmd, len(batch))
		for i, c := range batch {
			args := []any(c.cmd)
			if isNoScript(c.err) {
				args = c.cmd.Eval()
			}
			cmds[i] = redis.NewCmd(ctx, args...)
			cmds[i].SetFirstKeyPos(3)
		}
		for _, i := range clusterOrder(batch) {
			if i < 0 {
				_ = pipe.Process(ctx, redis.NewIntCmd(ctx, "pttl", batch[0].cmd.FirstKey()))
				continue
			}
			_ = pipe.Process(ctx, cmds[i])
		}
		_, err := pipe.Exec(ctx)
		for i, c := range batch {
			v, cerr := cmds[i].Result()
			if cerr == nil && v == nil && err != nil {
				// go-redis leaves the commands untouched when it gets no
				// connection (a failed dial, the pool's wait).
				cerr = err
			}
			c.reply, c.err = script.Reply(v, cerr)
		}
	}
}

// clusterOrder returns the order in which batch's calls go into a Cluster
// pipeline, as indexes of batch, with -1 for a command of one key put
// first whose reply is not read.
//
// go-redis's cluster pipeline (v9.5.5 to v9.23.0 at least) sends every
// command of a node's part of a pipeline again when the node answers the
// first of them TRYAGAIN (or another error it retries), those it is
// already following to another node for an ASK or a MOVED included: one
// command then runs on two nodes at once, from two goroutines that both
// write its reply, a data race. During a slot's migration a script of
// several keys may be answered TRYAGAIN while another is answered ASK, so
// the first command is one no node answers TRYAGAIN, which needs several
// keys: a call of one key, or else a PTTL of the first call's first key.
func clusterOrder(batch []*call) []int {
	order := make([]int, 0, len(batch)+1)
	first := -1
	for i, c := range batch {
		if c.cmd.NKeys() == 1 {
			first = i
			break
		}
	}
	order = append(order, first)
	for i := range batch {
		if i != first {
			order = append(order, i)
		}
	}
	return order
}

// tryAgainWithin reports whether c, answered TRYAGAIN at now (UnixNano) by
// an attempt that took took, may pause and make another attempt as long
// before its own deadline: the deadline as armed, before what trip.wait
// grants a silent Redis, since TRYAGAIN is an answer. A call without a
// timeout is sent again for as long as its caller waits.
func (c *call) tryAgainWithin(took, now int64) bool {
	return c.due == 0 || now+int64(tryAgainPause(c.tryAgains+1))+took < c.due
}

// beforeDeadline reports whether c can wait d and still be sent within its
// deadline.
func beforeDeadline(c *call, d time.Duration) bool {
	dl := c.deadline.Load()
	return dl == 0 || time.Now().Add(d).UnixNano() < dl
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// batchCommand returns the command of the allow script's batch form
// deciding every command of cmds in order: by EVAL if eval, else by EVALSHA.
func batchCommand(ctx context.Context, cmds []script.Command, eval bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, script.Batch(cmds, eval)...)
	cmd.SetFirstKeyPos(3)
	return cmd
}
