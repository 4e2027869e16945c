package roundtrip

import (
	"context"
	"sync/atomic"
	"time"
)

// Telling a silent Redis from a busy one, a busy process or a busy host.
// A call's timeout is how long Redis may stay silent while the call's
// command is out:
//
//   - while Redis answers other round trips of the node, those sent before
//     the call are ahead of it in Redis's queue, and the call waits on;
//   - a timer that fires late by more than promptly shows that this process
//     did not run for that long, so the reply may be in the socket unread:
//     the call gets that long again;
//   - a call whose time is up gets busyStep more if the process or the host
//     was busy since the round trip was sent (see busyMeter), and so on;
//     then a grace of promptly, so that a reply already read has the time
//     to be delivered.
//
// busyAllowance bounds what a busy process or host adds, so a dead Redis on
// a saturated host costs at most timeout + busyAllowance before the policy
// decides (and nothing once the breaker is open); on a host with CPU to
// spare, timeout + promptly.
//
// Opening a connection counts: a dial is refused at once by a dead host,
// and on a busy host the time a dial and HELLO take shows as busyness.
const (
	promptly      = 2 * time.Millisecond
	busyStep      = 10 * time.Millisecond
	busyAllowance = time.Second
)

// trip is one round trip: its batch, sent by a goroutine of exec's, and
// what wait knows of how late Redis may answer.
type trip struct {
	ln      *lane
	batch   []*call
	rt      uint64 // the round trip's number, for the breaker
	cancel  context.CancelFunc
	result  chan time.Duration // exec's report
	byExec  atomic.Int32       // calls exec delivered
	busy    busyMeter
	silence time.Duration // the longest a call went unanswered, of those wait failed
	timer   *time.Timer
}

// start sends batch on a goroutine of its own and returns its round trip.
func (ln *lane) start(batch []*call) *trip {
	rt := roundTrips.Add(1)
	now := time.Now()
	for _, c := range batch {
		c.arm(now)
	}
	// The timeouts below measure Redis alone: a dial or a pool wait must
	// not end early because of them. The context ends when the round trip
	// is given up.
	// go-redis gets no deadline of ours, only a backstop, so that with
	// ContextTimeoutEnabled an abandoned round trip ends soon after; without
	// it, within the client's ReadTimeout. The backstop lies a whole
	// allowance past the most that wait grants a busy process (busyAllowance),
	// because wait grants it from when its timer runs, and the time this
	// process is too busy to run the timer is not counted against Redis
	// either: with the backstop at the allowance itself, a dial on a
	// saturated host ended while wait still held the call.
	ctx, cancel := context.WithCancel(context.Background())
	if longest := maxTimeout(batch); longest > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), longest+2*busyAllowance+busyStep)
	}
	t := &trip{ln: ln, batch: batch, rt: rt, cancel: cancel, result: make(chan time.Duration, 1), busy: recentMeter()}
	go func() {
		silence, _ := ln.exec(ctx, batch, rt, &t.byExec, nil)
		t.result <- silence
	}()
	return t
}

// wait delivers each call's outcome, or errNoAnswer to a call whose Redis
// did not answer within its timeout after the command was sent, and
// reports the silence Redis showed (see exec), once every call has an
// outcome. It returns
// early with left true when leave is closed (the lone caller waiting on
// its own round trip left): the round trip is not over, and wait must be
// called again.
func (t *trip) wait(leave <-chan struct{}) (silence time.Duration, left bool) {
	batch, ln := t.batch, t.ln
	if t.timer == nil {
		t.timer = time.NewTimer(time.Hour)
	}
	for {
		var next int64
		open := false
		for _, c := range batch {
			if c.state.Load() != sent {
				continue
			}
			open = true
			if d := c.deadline.Load(); d != 0 && (next == 0 || d < next) {
				next = d
			}
		}
		if !open {
			// Every call is answered, timed out or gone. If exec answered
			// them all it is returning. Otherwise it may go on for a while
			// with nobody to tell; while the deadline of a call whose
			// caller left has not passed, its command may yet be answered,
			// and the round trip keeps its place in flight (and so its
			// connection counted) until then.
			if t.byExec.Load() == int32(len(batch)) {
				return t.end(<-t.result), false
			}
			if hold := time.Until(time.Unix(0, latestDeadline(batch))); hold > 0 {
				t.timer.Reset(hold)
				select {
				case s := <-t.result:
					return t.end(s), false
				case <-t.timer.C:
				}
			}
			return t.end(0), false
		}
		var expired <-chan time.Time
		if next != 0 {
			t.timer.Reset(time.Until(time.Unix(0, next)))
			expired = t.timer.C
		}
		select {
		case s := <-t.result:
			return t.end(s), false
		case <-leave:
			return 0, true
		case <-expired:
			now := time.Now()
			late := now.Sub(time.Unix(0, next))
			if t.busy.busy() || ln.answered.Load() == 0 {
				// A busy process or host, or a node never answered yet, whose
				// first round trips also dial and set up connections: the
				// silence may not be Redis's.
				late = max(late, busyStep)
			}
			failed := false
			for _, c := range batch {
				d := c.deadline.Load()
				if d == 0 || d > now.UnixNano() || c.state.Load() != sent {
					continue
				}
				switch {
				case now.Sub(time.Unix(0, ln.answered.Load())) < c.timeout:
					// Redis answers other round trips, and this one waits
					// behind them in Redis: it is busy, not failing.
					c.deadline.CompareAndSwap(d, ln.answered.Load()+int64(c.timeout))
				case late > promptly && c.added < busyAllowance:
					c.added += late
					c.deadline.CompareAndSwap(d, now.Add(late).UnixNano())
				case !c.graced:
					c.graced = true
					c.deadline.CompareAndSwap(d, now.Add(promptly).UnixNano())
				case ln.migrations.migrating(c, now.UnixNano()):
					// Not a silence: the call's slot migrates, and its
					// command is most likely inside go-redis's own
					// redirects (see migrations).
					c.finish(sent, outcome{err: errMigrating, h: healthUnknown, rt: t.rt})
				case c.finish(sent, outcome{err: errNoAnswer, h: healthFailed, rt: t.rt}):
					failed = true
					t.silence = max(t.silence, now.Sub(time.Unix(0, c.sentAt.Load())))
				}
			}
			if failed {
				ln.d.reload.maybe()
			}
		}
	}
}

// end releases the round trip's timer and context, and reports the silence
// Redis showed, given what exec reported.
func (t *trip) end(execSilence time.Duration) time.Duration {
	t.timer.Stop()
	t.cancel()
	return max(t.silence, execSilence)
}

// latestDeadline returns the latest deadline of batch's calls, in
// UnixNano; 0 if none has one.
func latestDeadline(batch []*call) int64 {
	var latest int64
	for _, c := range batch {
		latest = max(latest, c.deadline.Load())
	}
	return latest
}

// maxTimeout returns the longest timeout of batch, or 0 if a call has none.
func maxTimeout(batch []*call) time.Duration {
	var longest time.Duration
	for _, c := range batch {
		if c.timeout <= 0 {
			return 0
		}
		longest = max(longest, c.timeout)
	}
	return longest
}
