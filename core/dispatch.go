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
	if !d.lane(node).enqueue(c) {
		return outcome{err: errQueueFull}
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

// lane is the queue and round trips of one node.
type lane struct {
	d        *dispatcher
	answered atomic.Int64 // UnixNano of Redis's last answer to a round trip
	mu       sync.Mutex
	queue    []*call
	inFlight int
}

// enqueue adds c, and starts a round trip if fewer than maxInFlight are
// out. It returns false if the queue is full.
func (ln *lane) enqueue(c *call) bool {
	ln.mu.Lock()
	if len(ln.queue) >= ln.d.maxQueue {
		ln.mu.Unlock()
		return false
	}
	ln.queue = append(ln.queue, c)
	batch := ln.take()
	ln.mu.Unlock()
	if batch != nil {
		go ln.run(batch)
	}
	return true
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
		failed := ln.roundTrip(batch)
		ln.mu.Lock()
		var waiting []*call
		if failed {
			// Redis just failed this node: the calls waiting for it are
			// decided now rather than each paying the timeout again.
			waiting, ln.queue = ln.queue, nil
		}
		ln.inFlight--
		batch = ln.take()
		ln.mu.Unlock()
		for _, c := range waiting {
			c.finish(queued, outcome{err: errNodeFailed, h: healthUnknown})
		}
	}
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
	rt := roundTrips.Add(1)
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
	if longest := maxTimeout(batch); longest > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), longest+busyAllowance+busyStep)
	}
	defer cancel()
	result := make(chan bool, 1)
	var byExec atomic.Int32 // calls exec delivered
	go func() { result <- ln.exec(ctx, batch, rt, &byExec) }()

	busy := sinceRecently()
	graced := make([]bool, len(batch))
	added := make([]time.Duration, len(batch)) // allowance used for a busy process
	failed := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
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
			// them all it is returning; otherwise it may go on for a while
			// with nobody to tell.
			if byExec.Load() == int32(len(batch)) {
				return <-result
			}
			return failed
		}
		var expired <-chan time.Time
		if next != 0 {
			timer.Reset(time.Until(time.Unix(0, next)))
			expired = timer.C
		}
		select {
		case f := <-result:
			return failed || f
		case <-expired:
			now := time.Now()
			late := now.Sub(time.Unix(0, next))
			if busy.busy() {
				late = max(late, busyStep)
			}
			for i, c := range batch {
				d := c.deadline.Load()
				if d == 0 || d > now.UnixNano() || c.state.Load() != sent {
					continue
				}
				switch {
				case now.Sub(time.Unix(0, ln.answered.Load())) < c.timeout:
					// Redis answers other round trips, and this one waits
					// behind them in Redis: it is busy, not failing.
					c.deadline.CompareAndSwap(d, ln.answered.Load()+int64(c.timeout))
				case late > promptly && added[i] < busyAllowance:
					added[i] += late
					c.deadline.CompareAndSwap(d, now.Add(late).UnixNano())
				case !graced[i]:
					graced[i] = true
					c.deadline.CompareAndSwap(d, now.Add(promptly).UnixNano())
				case c.finish(sent, outcome{err: errNoAnswer, h: healthFailed, rt: rt}):
					failed = true
				}
			}
			if failed {
				ln.d.reload.maybe()
			}
		}
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
