package roundtrip

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/script"
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
	// maxInFlight*maxBatch+maxQueue (4,608) calls at one instant fails
	// beyond that with errQueueFull, which the Limiter's policy decides.
	maxQueue = 4096
	// yieldBelow is the number of waiting calls under which a lane yields
	// to the callers a round trip answered before it takes the next batch
	// (see lane.run). A round trip costs Redis half to two thirds of a
	// decision whatever it carries, so from this size on that is a tenth of
	// the batch's cost or less.
	yieldBelow = 8
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

// call is one decision waiting for, or on, a round trip.
type call struct {
	cmd     script.Command
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
	deadline atomic.Int64 // UnixNano by which Redis must answer; 0: no bound but the caller's context
	due      int64        // the deadline as armed, before any allowance; set before exec runs
	sentAt   atomic.Int64 // UnixNano when its command was last sent; set with due, and by exec (a waiter reads it as it gives up)

	// What exec sent again, and why. Only exec touches them.
	resent    bool // sent again after its connection broke
	evals     int  // times sent again by EVAL after NOSCRIPT
	downs     int  // times sent again after CLUSTERDOWN
	tryAgains int  // TRYAGAIN answers (see moving) in a row

	// What trip.wait granted the call beyond its timeout: for a busy
	// process, and a last grace. Only the round trip's wait touches them.
	added  time.Duration
	graced bool
}

// arm starts c's timeout: a command of c was just sent, at now.
func (c *call) arm(now time.Time) {
	c.sentAt.Store(now.UnixNano())
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
func (d *dispatcher) do(ctx context.Context, node string, cmd script.Command, timeout time.Duration) outcome {
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
		if silence, left := t.wait(ctx.Done()); left {
			// The round trip keeps its place in flight until it ends.
			go ln.finish(t)
		} else if next := ln.next(silence); next != nil {
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
	d          *dispatcher
	answered   atomic.Int64 // UnixNano of Redis's last answer to a round trip
	migrations migrations   // the hash tags the node answers TRYAGAIN
	deadlines  deadlines    // bounded's contexts
	mu         sync.Mutex
	queue      []*call
	inFlight   int
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
	silence, held := ln.bounded(ctx, []*call{c}, false)
	if held != nil {
		return outcome{}, false
	}
	o := c.kept // bounded decides every call it does not hold
	if next := ln.next(silence); next != nil {
		go ln.run(next)
	}
	return o, true
}

// bounded makes batch's round trip on this goroutine, for a client that
// gives up at a context's deadline: go-redis itself then bounds Redis's
// silence by the longest timeout of batch, and no goroutine stands between
// the calls and Redis. It reports the silence Redis showed (see exec), and
// returns the
// calls Redis did not answer in time while this process or its host was too
// busy to have read the answer, or, for a batch sent behind others (behind),
// while Redis answered other round trips of the node within the timeout:
// they are left sent, for a round trip that grants them those allowances
// (see trip.wait); their request ids make sure that a request Redis did
// record is counted once.
func (ln *lane) bounded(ctx context.Context, batch []*call, behind bool) (silence time.Duration, held []*call) {
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

// run sends batch, then the next batches while calls wait.
//
// When fewer than yieldBelow calls wait after a round trip, it first
// yields its thread to the callers the round trip answered, before it
// gives its place in flight back: those that decide again at once then
// join the next batch, rather than find a place free and each take a
// round trip of its own. A round trip costs both processes a write, a read
// and a wakeup whatever it carries, so a few larger batches leave the CPU
// to the decisions. When more wait, they go at once: the batch is large
// enough, and yielding would hold it up behind every goroutine ready to
// run. A lone caller never comes here: it makes its own round trip (see
// do).
func (ln *lane) run(batch []*call) {
	for batch != nil {
		silence := ln.roundTrip(batch)
		if ln.waiting() < yieldBelow {
			runtime.Gosched()
		}
		batch = ln.next(silence)
	}
}

// waiting returns the number of calls queued.
func (ln *lane) waiting() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.queue)
}

// roundTrip makes batch's round trip and reports the silence Redis showed
// (see exec).
// For a client that gives up at a context's deadline, once the node has
// answered, it is made on this goroutine (see bounded), so that the next
// batch goes out as soon as this one is answered, with no goroutine
// between; a batch whose calls have different timeouts, and the calls
// bounded holds, go through a round trip that trip.wait bounds call by
// call. A batch waits on Redis behind the batches ahead of it: bounded
// holds what times out while Redis answers them.
func (ln *lane) roundTrip(batch []*call) time.Duration {
	if ln.d.bounded && ln.answered.Load() != 0 && sameTimeout(batch) {
		silence, held := ln.bounded(context.Background(), batch, true)
		if held == nil {
			return silence
		}
		s, _ := ln.start(held).wait(nil)
		return max(silence, s)
	}
	silence, _ := ln.start(batch).wait(nil)
	return silence
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
	silence, _ := t.wait(nil)
	ln.run(ln.next(silence))
}

// next ends a round trip, after which Redis had left calls unanswered for
// silence (0 unless the round trip failed for want of an answer), and
// returns the next batch to send, if any, counted in flight.
//
// A waiting call whose own timeout Redis has now been silent for would
// fail the same way: it is decided at once rather than pay that timeout
// again. Every other waiting call stays queued and is sent, whatever the
// timeout of the calls that failed: Limiters of different timeouts share
// the lane, and one's timeout must not decide another's calls. The silence
// counts only until Redis's last answer to any round trip of the node.
func (ln *lane) next(silence time.Duration) []*call {
	if answered := ln.answered.Load(); silence > 0 && answered != 0 {
		silence = min(silence, time.Since(time.Unix(0, answered)))
	}
	ln.mu.Lock()
	var failed []*call
	if silence > 0 && len(ln.queue) > 0 {
		kept := ln.queue[:0]
		for _, c := range ln.queue {
			if outlasted(c, silence) {
				failed = append(failed, c)
			} else {
				kept = append(kept, c)
			}
		}
		clear(ln.queue[len(kept):])
		ln.queue = kept
		if len(ln.queue) == 0 {
			ln.queue = nil
		}
	}
	ln.inFlight--
	batch := ln.take()
	ln.mu.Unlock()
	for _, c := range failed {
		c.finish(queued, outcome{err: errNodeFailed, h: healthUnknown})
	}
	return batch
}

// outlasted reports whether a silence of Redis as long as silence would
// have failed c: c has a timeout, and silence reaches it, less the slack by
// which a shared deadline may end before it (see deadlines.within).
func outlasted(c *call, silence time.Duration) bool {
	return c.timeout > 0 && c.timeout-c.timeout/deadlineSlack <= silence
}
