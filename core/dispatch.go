package slidelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching limits, per Redis node of one client.
const (
	// maxBatch is the most calls one round trip carries.
	maxBatch = 128
	// maxInFlight is the most round trips in flight, and so the most pooled
	// connections the limiter holds, per node. go-redis's default pool
	// holds ten per CPU.
	maxInFlight = 4
	// maxQueue is the most calls waiting per node. A burst larger than
	// maxInFlight*maxBatch+maxQueue (4,608) calls at one instant is decided
	// by the policy beyond that, with an error wrapping ErrUnavailable.
	maxQueue = 4096
)

// roundTrips numbers round trips, for the breaker; 0 is no round trip.
var roundTrips atomic.Uint64

// dispatchers holds one dispatcher per client, so that every Limiter on a
// client shares its round trips and its bound on connections. An entry
// lives as long as the process; it holds no goroutine while idle.
var dispatchers sync.Map // redis.Scripter → *dispatcher

// dispatcher sends the decisions of every Limiter on one client as
// pipelines of EVALSHA: a call waits only while maxInFlight round trips to
// its node are out, and then leaves with the others waiting, at most
// maxBatch together. A lone caller is sent at once. It is safe for
// concurrent use.
type dispatcher struct {
	client  redis.Scripter
	pipe    func() redis.Pipeliner
	cluster *redis.ClusterClient // nil unless the client is one
	reload  *reloader

	// Limits; the defaults above, smaller in tests.
	maxBatch, maxInFlight, maxQueue int

	mu    sync.Mutex
	lanes map[string]*lane // by node address; "" for a client that is not a cluster
}

// dispatcherFor returns client's dispatcher, or nil if client cannot
// pipeline.
func dispatcherFor(client redis.Scripter) *dispatcher {
	p, ok := client.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		return nil
	}
	if d, ok := dispatchers.Load(client); ok {
		return d.(*dispatcher)
	}
	d := &dispatcher{client: client, pipe: p.Pipeline, maxBatch: maxBatch, maxInFlight: maxInFlight,
		maxQueue: maxQueue, lanes: make(map[string]*lane)}
	if c, ok := client.(*redis.ClusterClient); ok {
		d.cluster = c
		d.reload = &reloader{cluster: c}
	}
	actual, _ := dispatchers.LoadOrStore(client, d)
	return actual.(*dispatcher)
}

// node returns the address of the Cluster node that serves key, or "" for
// a client that is not a ClusterClient or whose slot map is unknown.
func (d *dispatcher) node(ctx context.Context, key string) string {
	if d == nil || d.cluster == nil {
		return ""
	}
	c, err := d.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	addr := c.Options().Addr
	return addr
}

func (d *dispatcher) lane(node string) *lane {
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.lanes[node]
	if ln == nil {
		ln = &lane{d: d}
		d.lanes[node] = ln
	}
	return ln
}

// Call states.
const (
	queued int32 = iota
	sent
	done
)

// call is one decision waiting for, or on, a round trip.
type call struct {
	keys    []string
	args    []any
	timeout time.Duration
	state   atomic.Int32
	out     chan outcome // buffered: a caller that left is never waited for

	cmd      *redis.Cmd   // set by the lane
	deadline atomic.Int64 // UnixNano by which Redis must answer; 0: no bound but the caller's context
}

// arm starts c's timeout: a command of c was just sent.
func (c *call) arm() {
	if c.timeout > 0 {
		c.deadline.Store(time.Now().Add(c.timeout).UnixNano())
	}
}

// outcome is what a call learns.
type outcome struct {
	reply []int64
	err   error
	h     health
	rt    uint64 // the round trip, for the breaker; 0 for none
}

// finish delivers o unless the call was already finished or left.
func (c *call) finish(from int32, o outcome) bool {
	if !c.state.CompareAndSwap(from, done) {
		return false
	}
	c.out <- o
	return true
}

// do runs the allow script with keys and args on node through the
// dispatcher, bounding Redis's answer by timeout once sent, and the whole
// call by ctx.
func (d *dispatcher) do(ctx context.Context, node string, keys []string, args []any, timeout time.Duration) outcome {
	if err := ctx.Err(); err != nil {
		return outcome{err: err}
	}
	c := &call{keys: keys, args: args, timeout: timeout, out: make(chan outcome, 1)}
	ln := d.lane(node)
	alone, ok := ln.enqueue(c)
	if !ok {
		return outcome{err: errQueueFull}
	}
	if alone {
		return ln.lone(ctx, c)
	}
	select {
	case o := <-c.out:
		return o
	case <-ctx.Done():
		// Leave: a queued call is never sent; a sent one's reply is dropped.
		c.state.Store(done)
		return outcome{err: ctx.Err()}
	}
}

// lone runs the round trip of c, which enqueue took as a batch of its own,
// on the caller's goroutine: a lone caller would otherwise wait for a
// goroutine of the lane to supervise the round trip, and that goroutine for
// the one that sends it, two hand-offs that cost more than the batching
// saves when there is nothing to batch (BENCHMARKS.md).
//
// The caller supervises (trip.wait) while exec sends on a goroutine of its
// own, and not the other way round: go-redis does not give up a read when a
// context is cancelled (only at a deadline), so a caller blocked in exec
// could not leave when ctx ends. Supervising, the caller also waits on
// ctx.Done, and leaves as in do: its call is marked done, so its reply is
// dropped, and the supervision carries on, on a goroutine of its own, from
// where the caller left it (the same timer, the same exec), so the round
// trip holds its place in flight exactly as long as if a goroutine of the
// lane had run it. Once the round trip is over, the caller hands the batch
// queued meanwhile, if any, to a goroutine of the lane: it never serves
// other callers.
func (ln *lane) lone(ctx context.Context, c *call) outcome {
	t := ln.start([]*call{c})
	failed, left := t.wait(ctx.Done())
	if left {
		c.state.Store(done)
		go ln.resume(t)
		return outcome{err: ctx.Err()}
	}
	t.end()
	if next := ln.after(failed); next != nil {
		go ln.run(next)
	}
	// Every call of an ended round trip has its outcome, delivered or
	// about to be (finish marks a call done before it sends).
	return <-c.out
}

// resume supervises t, which a lone caller left, to its end, then runs
// the batches that wait.
func (ln *lane) resume(t *trip) {
	failed, _ := t.wait(nil)
	t.end()
	ln.run(ln.after(failed))
}

// lane is the queue and round trips of one node.
type lane struct {
	d        *dispatcher
	answered atomic.Int64 // UnixNano of Redis's last answer to a round trip
	mu       sync.Mutex
	queue    []*call
	inFlight int
}

// enqueue adds c, and starts a round trip if fewer than maxInFlight are
// out; if that round trip carries c alone, it is not started but reported
// by alone, for the caller to run (see lone). It returns ok false if the
// queue is full.
func (ln *lane) enqueue(c *call) (alone, ok bool) {
	ln.mu.Lock()
	if len(ln.queue) >= ln.d.maxQueue {
		ln.mu.Unlock()
		return false, false
	}
	ln.queue = append(ln.queue, c)
	batch := ln.take()
	ln.mu.Unlock()
	switch {
	case len(batch) == 1 && batch[0] == c:
		return true, true
	case batch != nil:
		go ln.run(batch)
	}
	return false, true
}

// take removes the next batch from the queue and counts it in flight, or
// returns nil if the queue is empty or maxInFlight round trips are out.
// ln.mu is held.
func (ln *lane) take() []*call {
	if ln.inFlight >= ln.d.maxInFlight {
		return nil
	}
	var batch []*call
	i := 0
	for ; i < len(ln.queue) && len(batch) < ln.d.maxBatch; i++ {
		if c := ln.queue[i]; c.state.CompareAndSwap(queued, sent) {
			batch = append(batch, c)
		}
	}
	clear(ln.queue[:i])
	ln.queue = ln.queue[i:]
	if len(ln.queue) == 0 {
		ln.queue = nil
	}
	if batch == nil {
		return nil
	}
	ln.inFlight++
	return batch
}

// run sends batch, then the next batches while calls wait.
func (ln *lane) run(batch []*call) {
	for batch != nil {
		batch = ln.after(ln.roundTrip(batch))
	}
}

// after ends a round trip, which failed or not, and takes the next batch
// (see take).
func (ln *lane) after(failed bool) []*call {
	ln.mu.Lock()
	var waiting []*call
	if failed {
		// Redis just failed this node: the calls waiting for it are
		// decided now rather than each paying the timeout again.
		waiting, ln.queue = ln.queue, nil
	}
	ln.inFlight--
	batch := ln.take()
	ln.mu.Unlock()
	for _, c := range waiting {
		c.finish(queued, outcome{err: errNodeFailed, h: healthUnknown})
	}
	return batch
}

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

// roundTrip sends batch as one pipeline and delivers each call's outcome,
// or errNoAnswer to a call whose Redis did not answer within its timeout
// after the command was sent. It returns once every call has an outcome,
// and reports whether Redis failed.
func (ln *lane) roundTrip(batch []*call) bool {
	t := ln.start(batch)
	defer t.end()
	failed, _ := t.wait(nil)
	return failed
}

// trip is a round trip under way: exec sends it on a goroutine of its own
// while wait supervises the calls' timeouts.
type trip struct {
	ln     *lane
	batch  []*call
	rt     uint64
	cancel context.CancelFunc
	result chan bool    // exec's report
	byExec atomic.Int32 // calls exec delivered

	busy   *busyMeter
	graced []bool
	added  []time.Duration // allowance used for a busy process
	failed bool
	timer  *time.Timer
	next   int64 // the earliest deadline of a call, or the backstop, for timer; 0: none
	due    int64 // the earliest deadline of a call; 0: none
	held   bool  // a waiter left: wait on timer and next as they are

	backstop int64 // UnixNano at which the context ends, 0 once it has or for none
}

// backstop is the context of a round trip whose calls all have a timeout:
// its deadline is the backstop, for go-redis to set on the socket; it is
// cancelled when the round trip is given up, or by trip.wait once the
// backstop has passed. It works as context.WithTimeout did here but for
// arming no runtime timer of its own: a timer added to an idle process
// wakes a thread of the runtime's, measured at about 10 µs of every lone
// call on a 2-core host; the supervisor's timer serves instead. (Its Err
// past the backstop is context.Canceled, not DeadlineExceeded; both are a
// failed Redis to classify.) Embedding the cancel context keeps Done, Err
// and Value its own, so contexts derived from it need no goroutine.
type backstop struct {
	context.Context
	deadline time.Time
}

func (b backstop) Deadline() (time.Time, bool) { return b.deadline, true }

// start sends batch.
func (ln *lane) start(batch []*call) *trip {
	t := &trip{ln: ln, batch: batch, rt: roundTrips.Add(1), result: make(chan bool, 1)}
	for _, c := range batch {
		c.arm()
	}
	// The timeouts below measure Redis alone: a dial or a pool wait must
	// not end early because of them. The context ends when the round trip
	// is given up.
	// go-redis gets no deadline of ours, only a backstop past every
	// allowance, so that with ContextTimeoutEnabled an abandoned round trip
	// ends soon after; without it, within the client's ReadTimeout.
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	if longest := maxTimeout(batch); longest > 0 {
		t.backstop = time.Now().Add(longest + busyAllowance + busyStep).UnixNano()
		ctx = backstop{ctx, time.Unix(0, t.backstop)}
	}
	go func() { t.result <- ln.exec(ctx, batch, t.rt, &t.byExec) }()

	t.busy = sinceRecently()
	t.graced = make([]bool, len(batch))
	t.added = make([]time.Duration, len(batch))
	t.timer = time.NewTimer(time.Hour)
	return t
}

// end gives up what is left of t's round trip once wait has returned
// without leaving.
func (t *trip) end() {
	t.cancel()
	t.timer.Stop()
}

// wait supervises t until every call has an outcome, and reports whether
// Redis failed; or until leave is ready, and reports left: then wait, called
// again, goes on where it stopped.
func (t *trip) wait(leave <-chan struct{}) (failed, left bool) {
	for {
		if !t.held {
			var next int64
			open := false
			for _, c := range t.batch {
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
				// them all it is returning; otherwise it may go on for a while
				// with nobody to tell.
				if t.byExec.Load() == int32(len(t.batch)) {
					return <-t.result, false
				}
				return t.failed, false
			}
			t.due, t.next = next, next
			if t.backstop != 0 && (next == 0 || t.backstop < next) {
				t.next = t.backstop
			}
			if t.next != 0 {
				t.timer.Reset(time.Until(time.Unix(0, t.next)))
			}
		}
		t.held = false
		var expired <-chan time.Time
		if t.next != 0 {
			expired = t.timer.C
		}
		select {
		case f := <-t.result:
			return t.failed || f, false
		case <-expired:
			now := time.Now()
			if t.backstop != 0 && now.UnixNano() >= t.backstop {
				t.cancel()
				t.backstop = 0
			}
			if t.due != 0 && now.UnixNano() >= t.due {
				t.expire(now)
			}
		case <-leave:
			t.held = true
			return false, true
		}
	}
}

// expire handles the calls whose deadline, t.due or earlier, has passed
// by now.
func (t *trip) expire(now time.Time) {
	ln := t.ln
	late := now.Sub(time.Unix(0, t.due))
	if t.busy.busy() {
		late = max(late, busyStep)
	}
	for i, c := range t.batch {
		d := c.deadline.Load()
		if d == 0 || d > now.UnixNano() || c.state.Load() != sent {
			continue
		}
		switch {
		case now.Sub(time.Unix(0, ln.answered.Load())) < c.timeout:
			// Redis answers other round trips, and this one waits
			// behind them in Redis: it is busy, not failing.
			c.deadline.CompareAndSwap(d, ln.answered.Load()+int64(c.timeout))
		case late > promptly && t.added[i] < busyAllowance:
			t.added[i] += late
			c.deadline.CompareAndSwap(d, now.Add(late).UnixNano())
		case !t.graced[i]:
			t.graced[i] = true
			c.deadline.CompareAndSwap(d, now.Add(promptly).UnixNano())
		case c.finish(sent, outcome{err: errNoAnswer, h: healthFailed, rt: t.rt}):
			t.failed = true
		}
	}
	if t.failed {
		ln.d.reload.maybe()
	}
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

// retryDelays are the pauses before sending a command again after
// CLUSTERDOWN or TRYAGAIN, within the call's deadline.
var retryDelays = []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond}

// exec sends batch by EVALSHA in one pipeline; resends by EVAL, which
// also loads the script, the commands the node answered NOSCRIPT; retries
// CLUSTERDOWN and TRYAGAIN briefly; and delivers each outcome. It reports
// whether Redis failed the round trip: some calls failed and none was
// answered (on Cluster a batch can span a failed and a healthy node).
func (ln *lane) exec(ctx context.Context, batch []*call, rt uint64, delivered *atomic.Int32) bool {
	failed, answered := false, false
	pending := batch
	for attempt := 0; len(pending) > 0; attempt++ {
		pipe := ln.d.pipe()
		for _, c := range pending {
			if c.cmd != nil && isNoScript(c.cmd.Err()) {
				c.cmd = evalCmd(ctx, "eval", allowSource, c.keys, c.args)
				c.arm() // Redis answered; the resent command has the whole timeout
			} else {
				c.cmd = evalCmd(ctx, "evalsha", allowScript.Hash(), c.keys, c.args)
			}
			_ = pipe.Process(ctx, c.cmd)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			// go-redis leaves the commands untouched when it gets no
			// connection (a failed dial, the pool's wait): give them the error.
			for _, c := range pending {
				if c.cmd.Err() == nil && c.cmd.Val() == nil {
					c.cmd.SetErr(err)
				}
			}
		}

		if err := pending[0].cmd.Err(); err == nil || classify(err) == healthOK {
			ln.answered.Store(time.Now().UnixNano())
		}
		var again []*call
		reload, pause := false, false
		for _, c := range pending {
			if c.state.Load() != sent {
				continue // timed out or left; nothing to deliver
			}
			err := c.cmd.Err()
			switch {
			case isNoScript(err) && attempt <= len(retryDelays):
				again = append(again, c)
				continue
			case retryableReply(err) && attempt < len(retryDelays) && beforeDeadline(c, retryDelays[attempt]):
				again = append(again, c)
				reload, pause = true, true
				continue
			}
			reply, err := c.cmd.Int64Slice()
			h := classify(err)
			switch h {
			case healthFailed:
				failed = true
			case healthOK:
				answered = true
			}
			reload = reload || shouldReload(err)
			if c.finish(sent, outcome{reply: reply, err: err, h: h, rt: rt}) {
				delivered.Add(1)
			}
		}
		if reload {
			ln.d.reload.maybe()
		}
		if pause {
			if err := sleepCtx(ctx, retryDelays[attempt]); err != nil {
				for _, c := range again {
					if c.finish(sent, outcome{err: c.cmd.Err(), h: healthFailed, rt: rt}) {
						delivered.Add(1)
					}
				}
				return true
			}
		}
		pending = again
	}
	return failed && !answered // a batch that Redis partly answered drains nothing
}

// beforeDeadline reports whether c can wait d and still be sent within its
// deadline.
func beforeDeadline(c *call, d time.Duration) bool {
	dl := c.deadline.Load()
	return dl == 0 || time.Now().Add(d).UnixNano() < dl
}

// evalCmd returns an EVAL or EVALSHA command of the allow script.
func evalCmd(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	return redis.NewCmd(ctx, cmdArgs...)
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

// eval runs the allow script for keys and args: through the client's
// dispatcher, or on its own for a client that cannot pipeline; unless the
// breaker of keys' node is open. It feeds the breaker what the round trip
// told about Redis.
func (l *Limiter) eval(ctx context.Context, keys []string, args []any) ([]int64, error) {
	node := l.disp.node(ctx, keys[0])
	probe, err := l.brk.admit(node)
	if err != nil {
		return nil, err
	}
	var o outcome
	if l.disp != nil {
		o = l.disp.do(ctx, node, keys, args, l.cfg.timeout)
	} else {
		o.err = l.run(ctx, func(ctx context.Context) error {
			var err error
			o.reply, err = allowScript.Run(ctx, l.client, keys, args...).Int64Slice()
			return err
		})
		o.h, o.rt = classify(o.err), roundTrips.Add(1)
	}
	if ctx.Err() != nil && o.err != nil {
		o.h = healthUnknown // the caller's context ended: that says nothing about Redis
	}
	l.brk.record(node, o.rt, o.h, probe)
	return o.reply, o.err
}
