package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"weak"

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
	// maxScriptBatch is the most requests one call of allow.lua's batch
	// form decides, so that one script never holds Redis for long (about
	// 1 ms at 32); a larger batch is several such calls in one pipeline.
	maxScriptBatch = 32
	// maxQueue is the most calls waiting per node. A burst larger than
	// maxInFlight*maxBatch+maxQueue (4,608) calls at one instant is decided
	// by the policy beyond that, with an error wrapping ErrUnavailable.
	maxQueue = 4096
)

// roundTrips numbers round trips, for the breaker; 0 is no round trip.
var roundTrips atomic.Uint64

// dispatchers holds one dispatcher per go-redis client, so that every
// Limiter on a client shares its round trips and its bound on connections.
// Both sides are weak: an entry keeps neither the client nor the
// dispatcher alive, and goes when the dispatcher does, once no Limiter
// holds it.
var dispatchers sync.Map // weak.Pointer to the client → weak.Pointer[dispatcher]

// dispatchersMu serialises making dispatchers, so that two Limiters made at
// once on one client share one.
var dispatchersMu sync.Mutex

// dispatcher sends the decisions of every Limiter on one client: a call
// waits only while maxInFlight round trips to its node are out, and then
// leaves with the others waiting, at most maxBatch together. A lone caller
// sends its own call at once. A batch goes to a standalone Redis as one
// EVALSHA of allow.lua's batch form, and to a Cluster or a Ring as a
// pipeline of EVALSHA; every command goes through the client, so its hooks,
// pool, Limiter and options apply. It is safe for concurrent use.
type dispatcher struct {
	client  redis.Scripter
	pipe    func() redis.Pipeliner
	process func(context.Context, redis.Cmder) error
	cluster *redis.ClusterClient // nil unless the client is one
	single  bool                 // one Redis serves every key: batches go as one script call
	bounded bool                 // the client gives up at a context's deadline
	reload  *reloader

	// Limits; the defaults above, smaller in tests.
	maxBatch, maxInFlight, maxQueue int

	only  *lane // the one lane of a client that is not a cluster
	mu    sync.Mutex
	lanes map[string]*lane // by node address, for a cluster
}

// dispatcherFor returns client's dispatcher, or nil if client cannot
// pipeline or process a command of its own making, as every client of
// go-redis can. Limiters on one *redis.Client, *redis.ClusterClient,
// *redis.Ring or *redis.Conn share a dispatcher; any other client value
// gets one of its own.
func dispatcherFor(client redis.Scripter) *dispatcher {
	p, ok := client.(interface {
		Pipeline() redis.Pipeliner
		Process(ctx context.Context, cmd redis.Cmder) error
	})
	if !ok {
		return nil
	}
	var key any
	switch c := client.(type) {
	case *redis.Client:
		key = weak.Make(c)
	case *redis.ClusterClient:
		key = weak.Make(c)
	case *redis.Ring:
		key = weak.Make(c)
	case *redis.Conn:
		key = weak.Make(c)
	default:
		return newDispatcher(client, p.Pipeline, p.Process)
	}
	dispatchersMu.Lock()
	defer dispatchersMu.Unlock()
	if v, ok := dispatchers.Load(key); ok {
		if d := v.(weak.Pointer[dispatcher]).Value(); d != nil {
			return d
		}
	}
	d := newDispatcher(client, p.Pipeline, p.Process)
	wd := weak.Make(d)
	dispatchers.Store(key, wd)
	runtime.AddCleanup(d, forgetDispatcher, dispatcherEntry{key, wd})
	return d
}

// dispatcherEntry is one entry of dispatchers.
type dispatcherEntry struct {
	key any
	d   weak.Pointer[dispatcher]
}

// forgetDispatcher removes e from dispatchers, unless a newer dispatcher
// took its place.
func forgetDispatcher(e dispatcherEntry) {
	dispatchers.CompareAndDelete(e.key, e.d)
}

func newDispatcher(client redis.Scripter, pipe func() redis.Pipeliner, process func(context.Context, redis.Cmder) error) *dispatcher {
	d := &dispatcher{client: client, pipe: pipe, process: process, maxBatch: maxBatch, maxInFlight: maxInFlight,
		maxQueue: maxQueue, lanes: make(map[string]*lane), bounded: honoursDeadlines(client)}
	switch c := client.(type) {
	case *redis.ClusterClient:
		d.cluster = c
		d.reload = &reloader{cluster: c}
	case *redis.Client:
		d.single = true
	case *redis.Conn:
		// One connection, not safe for concurrent use: one round trip at
		// a time, the calls that wait meanwhile going out together next.
		d.single, d.maxInFlight = true, 1
	}
	if d.cluster == nil {
		d.only = &lane{d: d}
	}
	return d
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

// lane returns node's lane: a client that is not a cluster has one. For a
// cluster, a node seen for the first time means the cluster's membership
// changed: the lanes of nodes with nothing queued or in flight are dropped
// then, so that departed nodes leave nothing behind (a caller still holding
// one finishes on it as usual).
func (d *dispatcher) lane(node string) *lane {
	if d.only != nil {
		return d.only
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.lanes[node]
	if ln == nil {
		for addr, other := range d.lanes {
			if other.idle() {
				delete(d.lanes, addr)
			}
		}
		ln = &lane{d: d}
		d.lanes[node] = ln
	}
	return ln
}

// idle reports whether ln has nothing queued or in flight.
func (ln *lane) idle() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.inFlight == 0 && len(ln.queue) == 0
}

// Call states.
const (
	queued int32 = iota
	sent
	done
)

// command is the EVALSHA of the allow script for one request: "evalsha",
// the script's hash, the number of keys, the keys, then ARGV. The limiter
// builds it once, and a call sent alone goes to the client as it is.
type command []any

// Boxed once, so that no command boxes them again.
var evalshaArg, allowHashArg any = "evalsha", allowScript.Hash()

// newCommand returns a command of nkeys keys and nargs arguments, to be
// appended in that order.
func newCommand(nkeys, nargs int) command {
	cmd := make(command, 3, 3+nkeys+nargs)
	cmd[0], cmd[1], cmd[2] = evalshaArg, allowHashArg, nkeys
	return cmd
}

// nkeys returns how many keys cmd names.
func (cmd command) nkeys() int { return cmd[2].(int) }

// firstKey returns the first key cmd names.
func (cmd command) firstKey() string { return cmd[3].(string) }

// keys returns the keys cmd names.
func (cmd command) keys() []string {
	keys := make([]string, cmd.nkeys())
	for i := range keys {
		keys[i] = cmd[3+i].(string)
	}
	return keys
}

// args returns cmd's ARGV.
func (cmd command) args() []any { return cmd[3+cmd.nkeys():] }

// eval returns cmd as an EVAL of the script's source, in a slice of its
// own, for a Redis that answered NOSCRIPT.
func (cmd command) eval() []any {
	out := make([]any, len(cmd))
	copy(out, cmd)
	out[0], out[1] = "eval", allowSource
	return out
}

// call is one decision waiting for, or on, a round trip.
type call struct {
	cmd     command
	timeout time.Duration
	state   atomic.Int32
	// out delivers the outcome, buffered so that a caller that left is
	// never waited for. It is nil while the caller makes the round trip
	// itself on its own goroutine (lane.direct): the outcome is then kept.
	out  chan outcome
	kept outcome

	// The last attempt's answer, set by exec.
	reply    []int64
	err      error
	resent   bool         // sent again after its connection broke
	deadline atomic.Int64 // UnixNano by which Redis must answer; 0: no bound but the caller's context
	due      int64        // the deadline as armed, before any allowance; set before exec runs

	// What trip.wait granted the call beyond its timeout: for a busy
	// process, and a last grace. Only the round trip's wait touches them.
	added  time.Duration
	graced bool
}

// arm starts c's timeout: a command of c was just sent, at now.
func (c *call) arm(now time.Time) {
	if c.timeout > 0 {
		d := now.Add(c.timeout).UnixNano()
		c.due = d
		c.deadline.Store(d)
	}
}

// late reports whether Redis, answering c at now (UnixNano), answered
// after c's timeout, within what trip.wait granted beyond it.
func (c *call) late(now int64) bool {
	return c.due != 0 && now > c.due
}

// outcome is what a call learns.
type outcome struct {
	reply []int64
	err   error
	h     health
	rt    uint64 // the round trip, for the breaker; 0 for none
	late  bool   // answered past the call's timeout, by an allowance
}

// finish delivers o unless the call was already finished or left.
func (c *call) finish(from int32, o outcome) bool {
	if !c.state.CompareAndSwap(from, done) {
		return false
	}
	if c.out == nil {
		c.kept = o
		return true
	}
	c.out <- o
	return true
}

// do runs the allow script's command cmd on node through the
// dispatcher, bounding Redis's answer by timeout once sent, and the whole
// call by ctx. A caller that finds its node's lane idle sends its call
// itself, with no goroutine of the lane's in between.
func (d *dispatcher) do(ctx context.Context, node string, cmd command, timeout time.Duration) outcome {
	if err := ctx.Err(); err != nil {
		return outcome{err: err}
	}
	c := &call{cmd: cmd, timeout: timeout}
	ln := d.lane(node)
	alone, ok := ln.enqueue(c)
	if !ok {
		return outcome{err: errQueueFull}
	}
	if alone && d.bounded && timeout > 0 && ln.answered.Load() != 0 {
		// A client that bounds its I/O by the context's deadline needs no
		// goroutine of the lane's to keep the timeout, once its node has
		// answered (a first round trip dials, which trip.wait allows for).
		if o, ok := ln.direct(ctx, c); ok {
			return o
		}
	}
	if alone {
		c.out = make(chan outcome, 1)
		t := ln.start([]*call{c})
		if failed, left := t.wait(ctx.Done()); left {
			// The round trip keeps its place in flight until it ends.
			go ln.finish(t)
		} else if next := ln.next(failed); next != nil {
			go ln.run(next)
		}
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
	d         *dispatcher
	answered  atomic.Int64 // UnixNano of Redis's last answer to a round trip
	deadlines deadlines    // bounded's contexts
	mu        sync.Mutex
	queue     []*call
	inFlight  int
}

// enqueue adds c, and starts a round trip if fewer than maxInFlight are
// out. It reports whether c alone is that round trip, which its caller
// then makes, and returns ok false if the queue is full.
func (ln *lane) enqueue(c *call) (alone, ok bool) {
	ln.mu.Lock()
	if len(ln.queue) >= ln.d.maxQueue {
		ln.mu.Unlock()
		return false, false
	}
	if len(ln.queue) == 0 && ln.inFlight < ln.d.maxInFlight {
		// Nothing waits: c alone is the next round trip.
		c.state.Store(sent)
		ln.inFlight++
		ln.mu.Unlock()
		return true, true
	}
	ln.queue = append(ln.queue, c)
	batch := ln.take()
	alone = len(batch) == 1 && batch[0] == c
	if !alone {
		// Another goroutine delivers c's outcome.
		c.out = make(chan outcome, 1)
	}
	ln.mu.Unlock()
	if alone {
		return true, true
	}
	if batch != nil {
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

// direct makes the round trip of c, its lone call, on the caller's
// goroutine (see bounded). A caller whose context ends waits for c's
// timeout at most (the client only reads the context's deadline). It
// reports false, with c still sent and the lane's slot still held, if the
// call must be sent again: the caller then waits for it as for any round
// trip.
func (ln *lane) direct(ctx context.Context, c *call) (outcome, bool) {
	failed, held := ln.bounded(ctx, []*call{c}, false)
	if held != nil {
		return outcome{}, false
	}
	o := c.kept // bounded decides every call it does not hold
	if next := ln.next(failed); next != nil {
		go ln.run(next)
	}
	return o, true
}

// bounded makes batch's round trip on this goroutine, for a client that
// gives up at a context's deadline: go-redis itself then bounds Redis's
// silence by the longest timeout of batch, and no goroutine stands between
// the calls and Redis. It reports whether Redis failed, and returns the
// calls Redis did not answer in time while this process or its host was too
// busy to have read the answer, or, for a batch sent behind others (behind),
// while Redis answered other round trips of the node within the timeout:
// they are left sent, for a round trip that grants them those allowances
// (see trip.wait); their request ids make sure that a request Redis did
// record is counted once.
func (ln *lane) bounded(ctx context.Context, batch []*call, behind bool) (failed bool, held []*call) {
	busy := recentMeter()
	now := time.Now()
	rctx := ln.deadlines.within(ctx, now, maxTimeout(batch))
	for _, c := range batch {
		c.arm(now)
	}
	asked, wasBusy := false, false
	hold := func(err error) bool {
		if ctx.Err() != nil || !isTimeout(err) {
			return false
		}
		if !asked {
			asked, wasBusy = true, busy.busy()
		}
		return wasBusy || behind && time.Since(time.Unix(0, ln.answered.Load())) < maxTimeout(batch)
	}
	var delivered atomic.Int32
	return ln.exec(rctx, batch, roundTrips.Add(1), &delivered, hold)
}

// brokenConn reports whether err is a connection that broke under a
// command: closed or reset by the peer.
func brokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isTimeout reports whether err is a deadline passing: a context's, or a
// connection's read or write deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// run sends batch, then the next batches while calls wait.
func (ln *lane) run(batch []*call) {
	for batch != nil {
		batch = ln.next(ln.roundTrip(batch))
	}
}

// roundTrip makes batch's round trip and reports whether Redis failed it.
// For a client that gives up at a context's deadline, once the node has
// answered, it is made on this goroutine (see bounded), so that the next
// batch goes out as soon as this one is answered, with no goroutine
// between; a batch whose calls have different timeouts, and the calls
// bounded holds, go through a round trip that trip.wait bounds call by
// call. A batch waits on Redis behind the batches ahead of it: bounded
// holds what times out while Redis answers them.
func (ln *lane) roundTrip(batch []*call) bool {
	if ln.d.bounded && ln.answered.Load() != 0 && sameTimeout(batch) {
		failed, held := ln.bounded(context.Background(), batch, true)
		if held == nil {
			return failed
		}
		f, _ := ln.start(held).wait(nil)
		return failed || f
	}
	failed, _ := ln.start(batch).wait(nil)
	return failed
}

// sameTimeout reports whether every call of batch has one timeout, and
// one that bounds it.
func sameTimeout(batch []*call) bool {
	for _, c := range batch {
		if c.timeout <= 0 || c.timeout != batch[0].timeout {
			return false
		}
	}
	return true
}

// finish waits for the end of t, whose caller left, then sends the next
// batches while calls wait.
func (ln *lane) finish(t *trip) {
	failed, _ := t.wait(nil)
	ln.run(ln.next(failed))
}

// next ends a round trip, which failed or not, and returns the next batch
// to send, if any, counted in flight.
func (ln *lane) next(failed bool) []*call {
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

// trip is one round trip: its batch, sent by a goroutine of exec's, and
// what wait knows of how late Redis may answer.
type trip struct {
	ln     *lane
	batch  []*call
	rt     uint64 // the round trip's number, for the breaker
	cancel context.CancelFunc
	result chan bool    // exec's report
	byExec atomic.Int32 // calls exec delivered
	busy   busyMeter
	failed bool
	timer  *time.Timer
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
	t := &trip{ln: ln, batch: batch, rt: rt, cancel: cancel, result: make(chan bool, 1), busy: recentMeter()}
	go func() {
		failed, _ := ln.exec(ctx, batch, rt, &t.byExec, nil)
		t.result <- failed
	}()
	return t
}

// wait delivers each call's outcome, or errNoAnswer to a call whose Redis
// did not answer within its timeout after the command was sent, and
// reports whether Redis failed, once every call has an outcome. It returns
// early with left true when leave is closed (the lone caller waiting on
// its own round trip left): the round trip is not over, and wait must be
// called again.
func (t *trip) wait(leave <-chan struct{}) (failed, left bool) {
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
				case f := <-t.result:
					return t.end(f), false
				case <-t.timer.C:
				}
			}
			return t.end(false), false
		}
		var expired <-chan time.Time
		if next != 0 {
			t.timer.Reset(time.Until(time.Unix(0, next)))
			expired = t.timer.C
		}
		select {
		case f := <-t.result:
			return t.end(f), false
		case <-leave:
			return false, true
		case <-expired:
			now := time.Now()
			late := now.Sub(time.Unix(0, next))
			if t.busy.busy() || ln.answered.Load() == 0 {
				// A busy process or host, or a node never answered yet, whose
				// first round trips also dial and set up connections: the
				// silence may not be Redis's.
				late = max(late, busyStep)
			}
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
				case c.finish(sent, outcome{err: errNoAnswer, h: healthFailed, rt: t.rt}):
					t.failed = true
				}
			}
			if t.failed {
				ln.d.reload.maybe()
			}
		}
	}
}

// end releases the round trip's timer and context, and reports whether
// Redis failed it, given what exec reported.
func (t *trip) end(execFailed bool) bool {
	t.timer.Stop()
	t.cancel()
	return t.failed || execFailed
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

// retryDelays are the pauses before sending a command again after
// CLUSTERDOWN or TRYAGAIN, within the call's deadline.
var retryDelays = []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond}

// exec sends batch (see send); resends by EVAL, which also loads the
// script, the calls the node answered NOSCRIPT; retries CLUSTERDOWN and
// TRYAGAIN briefly; and delivers each outcome, but for the calls whose
// error hold (if not nil) keeps: those it returns, undelivered. It reports
// whether Redis failed the round trip: some calls failed and none was
// answered (on Cluster a batch can span a failed and a healthy node).
func (ln *lane) exec(ctx context.Context, batch []*call, rt uint64, delivered *atomic.Int32, hold func(error) bool) (failedTrip bool, held []*call) {
	failed, answered := false, false
	pending := batch
	for attempt := 0; len(pending) > 0; attempt++ {
		ln.send(ctx, pending)
		at := time.Now().UnixNano()
		if err := pending[0].err; err == nil || classify(err) == healthOK {
			ln.answered.Store(at)
		}
		var again []*call
		reload, pause := false, false
		for _, c := range pending {
			if c.state.Load() != sent {
				continue // timed out or left; nothing to deliver
			}
			switch {
			case isNoScript(c.err) && attempt <= len(retryDelays):
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
			case retryableReply(c.err) && attempt < len(retryDelays) && beforeDeadline(c, retryDelays[attempt]):
				again = append(again, c)
				reload, pause = true, true
				continue
			}
			h := classify(c.err)
			if h == healthFailed && hold != nil && hold(c.err) {
				held = append(held, c)
				continue
			}
			switch h {
			case healthFailed:
				failed = true
			case healthOK:
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
		if pause {
			if err := sleepCtx(ctx, retryDelays[attempt]); err != nil {
				for _, c := range again {
					if c.finish(sent, outcome{err: c.err, h: healthFailed, rt: rt}) {
						delivered.Add(1)
					}
				}
				return true, held
			}
		}
		pending = again
	}
	return failed && !answered, held // a batch that Redis partly answered drains nothing
}

// send runs the allow script for every call of batch, by EVAL for a call
// whose last answer was NOSCRIPT and otherwise by EVALSHA, and sets each
// call's reply and error. A lone call is its own command, whose reply
// go-redis reads straight into integers; several go to a standalone Redis
// as one command of the script's batch form, and otherwise as a pipeline.
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
			args = c.cmd.eval()
		}
		cmd := redis.NewIntSliceCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		_ = ln.d.process(ctx, cmd)
		c.reply, c.err = cmd.Result()
	case ln.d.single && len(batch) <= maxScriptBatch:
		cmd := batchCommand(ctx, batch, eval)
		_ = ln.d.process(ctx, cmd)
		replies, err := cmd.Slice()
		for i, c := range batch {
			c.reply, c.err = batchReply(replies, i, err)
		}
	case ln.d.single:
		// Several script calls of at most maxScriptBatch requests each,
		// in one pipeline.
		pipe := ln.d.pipe()
		var cmds []*redis.Cmd
		for from := 0; from < len(batch); from += maxScriptBatch {
			cmd := batchCommand(ctx, batch[from:min(from+maxScriptBatch, len(batch))], eval)
			cmds = append(cmds, cmd)
			_ = pipe.Process(ctx, cmd)
		}
		_, err := pipe.Exec(ctx)
		for i, c := range batch {
			cmd := cmds[i/maxScriptBatch]
			replies, cerr := cmd.Slice()
			if cerr == nil && replies == nil && err != nil {
				cerr = err // no connection: go-redis left the command untouched
			}
			c.reply, c.err = batchReply(replies, i%maxScriptBatch, cerr)
		}
	default:
		pipe := ln.d.pipe()
		cmds := make([]*redis.Cmd, len(batch))
		for i, c := range batch {
			args := []any(c.cmd)
			if isNoScript(c.err) {
				args = c.cmd.eval()
			}
			cmds[i] = redis.NewCmd(ctx, args...)
			cmds[i].SetFirstKeyPos(3)
			_ = pipe.Process(ctx, cmds[i])
		}
		_, err := pipe.Exec(ctx)
		for i, c := range batch {
			c.reply, c.err = cmds[i].Int64Slice()
			if c.err == nil && c.reply == nil && err != nil {
				// go-redis leaves the commands untouched when it gets no
				// connection (a failed dial, the pool's wait).
				c.err = err
			}
		}
	}
}

// batchCommand returns the command of allow.lua's batch form deciding
// every call of batch in order: by EVAL if eval, else by EVALSHA.
func batchCommand(ctx context.Context, batch []*call, eval bool) *redis.Cmd {
	nkeys, nargs := 0, 1
	for _, c := range batch {
		nkeys += c.cmd.nkeys()
		nargs += 1 + len(c.cmd.args())
	}
	args := make([]any, 0, 3+nkeys+nargs)
	if eval {
		args = append(args, "eval", allowSource, nkeys)
	} else {
		args = append(args, evalshaArg, allowHashArg, nkeys)
	}
	for _, c := range batch {
		n := c.cmd.nkeys()
		args = append(args, c.cmd[3:3+n]...)
	}
	args = append(args, "*")
	for _, c := range batch {
		args = append(args, c.cmd[2]) // the request's number of keys
		args = append(args, c.cmd.args()...)
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// batchReply returns the reply of request i of a batch whose command
// returned replies and err.
func batchReply(replies []any, i int, err error) ([]int64, error) {
	switch {
	case err != nil:
		return nil, err
	case len(replies) <= i:
		return nil, fmt.Errorf("allow script: a batch reply of %d for more requests", len(replies))
	}
	switch r := replies[i].(type) {
	case error:
		return nil, r
	case []any:
		out := make([]int64, len(r))
		for j, v := range r {
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("allow script: unexpected value %v in a batch reply", v)
			}
			out[j] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("allow script: unexpected batch reply %v", replies[i])
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

// evalAlone runs the allow script's command cmd on a client that cannot
// pipeline, bounded by the limiter's timeout.
func (l *Limiter) evalAlone(ctx context.Context, cmd command) outcome {
	var reply []int64
	err := l.run(ctx, func(ctx context.Context) error {
		var err error
		reply, err = allowScript.Run(ctx, l.client, cmd.keys(), cmd.args()...).Int64Slice()
		return err
	})
	return outcome{reply: reply, err: err, h: classify(err), rt: roundTrips.Add(1)}
}

// eval runs the allow script's command cmd: through the client's
// dispatcher, or on its own for a client that cannot pipeline; unless the
// breaker of its keys' node is open. It feeds the breaker what the round trip
// told about Redis.
func (l *Limiter) eval(ctx context.Context, cmd command) ([]int64, error) {
	node := l.disp.node(ctx, cmd.firstKey())
	probe, err := l.brk.admit(node)
	if err != nil {
		return nil, err
	}
	var o outcome
	if l.disp != nil {
		o = l.disp.do(ctx, node, cmd, l.cfg.timeout)
	} else {
		o = l.evalAlone(ctx, cmd)
	}
	if ctx.Err() != nil && o.err != nil {
		o.h = healthUnknown // the caller's context ended: that says nothing about Redis
	}
	if probe && o.late && o.h == healthOK {
		// A probe checks that Redis answers within the timeout. Answered
		// only within the allowance for a busy host, it does not close the
		// circuit: a slow Redis would otherwise close it at every cooldown
		// and hold a whole burst of callers past their timeout each time.
		o.h = healthFailed
	}
	l.brk.record(node, o.rt, o.h, probe)
	return o.reply, o.err
}
