package roundtrip

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/script"
)

// ErrCircuitOpen means a call was not sent because the circuit breaker of
// its Redis node is open. Package slidelimit exports it as its own
// ErrCircuitOpen, so its message names that package.
var ErrCircuitOpen = errors.New("slidelimit: circuit open")

// Config is what a Caller needs of its Limiter's options.
type Config struct {
	// Timeout is how long Redis may stay silent once a call's command is
	// sent (see trip.wait for what it grants beyond). Zero means no bound
	// but the caller's context.
	Timeout time.Duration
	// BreakerFailures is how many consecutive failed round trips to one
	// Redis node open its circuit. Zero disables the breaker.
	BreakerFailures int
	// BreakerCooldown is how long an open circuit refuses calls before it
	// lets one probe through.
	BreakerCooldown time.Duration
}

// Caller makes the round trips of one Limiter: its decisions, through the
// dispatcher its client shares with every other Limiter on it, and its
// other commands, one at a time. It keeps the Limiter's circuit breaker.
// It is safe for concurrent use.
type Caller struct {
	client  redis.Scripter
	timeout time.Duration
	bounded bool        // the client itself gives up at a context's deadline
	cluster bool        // the client is a ClusterClient, which follows redirects
	disp    *dispatcher // nil for a client that cannot pipeline
	brk     *breaker    // nil when disabled
}

// New returns the Caller of a Limiter on client with cfg. It does not
// contact Redis.
func New(client redis.Scripter, cfg Config) *Caller {
	return &Caller{
		client:  client,
		timeout: cfg.Timeout,
		bounded: honoursDeadlines(client),
		cluster: isCluster(client),
		disp:    dispatcherFor(client),
		brk:     newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown),
	}
}

// Decide runs the allow script's command cmd and returns its reply: through
// the client's dispatcher, or on its own for a client that cannot
// pipeline; unless the breaker of its keys' node is open, when the error
// wraps ErrCircuitOpen. It feeds the breaker what the round trip told
// about Redis. Redis's answer is bounded by the Caller's timeout once the
// command is sent, and the whole call by ctx.
func (c *Caller) Decide(ctx context.Context, cmd script.Command) ([]int64, error) {
	node := c.disp.node(ctx, cmd.FirstKey())
	probe, err := c.brk.admit(node)
	if err != nil {
		return nil, err
	}
	var o outcome
	if c.disp != nil {
		o = c.disp.do(ctx, node, cmd, c.timeout)
	} else {
		o = c.decideAlone(ctx, cmd)
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
	c.brk.record(node, o.rt, o.h, probe)
	return o.reply, o.err
}

// decideAlone runs the allow script's command cmd on a client that cannot
// pipeline, bounded by the timeout.
func (c *Caller) decideAlone(ctx context.Context, cmd script.Command) outcome {
	var reply []int64
	err := c.Run(ctx, func(ctx context.Context) error {
		var err error
		reply, err = script.Reply(cmd.Script().Run(ctx, c.client, cmd.Keys(), cmd.Args()...).Result())
		return err
	})
	return outcome{reply: reply, err: err, h: classify(err), rt: roundTrips.Add(1)}
}

// Run calls do with ctx bounded by the timeout, and returns by the
// deadline even when the client would wait longer. go-redis gives up at a
// context's deadline only with ContextTimeoutEnabled; otherwise it waits
// for its own ReadTimeout (3 s by default), so do runs on a goroutine of
// its own, which finishes or fails with the client's timeouts after Run
// returned. Either way Redis may still execute a command that was sent.
// A do that returns TRYAGAIN (see moving) is called again, after a
// growing pause, while the deadline leaves time for another call as long
// as the last. Run neither asks nor feeds the breaker.
func (c *Caller) Run(ctx context.Context, do func(context.Context) error) error {
	return c.RunFor(ctx, c.timeout, do)
}

// RunFor is Run bounded by timeout (0: none) instead of the Caller's own:
// for a call made on this Caller's client on behalf of another limiter,
// whose timeout decides it.
func (c *Caller) RunFor(ctx context.Context, timeout time.Duration, do func(context.Context) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if c.bounded {
		return tryAgain(ctx, do, c.cluster)
	}
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return tryAgain(ctx, do, c.cluster) // nothing could end the wait early
	}
	done := make(chan error, 1)
	go func() { done <- tryAgain(ctx, do, c.cluster) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryAgain calls do, and again after each TRYAGAIN (see moving; cluster
// says the client is a ClusterClient) while ctx leaves time for a pause
// and another call as long as the last; it returns do's last error.
func tryAgain(ctx context.Context, do func(context.Context) error, cluster bool) error {
	for n := 1; ; n++ {
		began := time.Now()
		err := do(ctx)
		if !moving(err, cluster) {
			return err
		}
		pause := tryAgainPause(n)
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(pause+time.Since(began)).Before(deadline) {
			return err
		}
		if sleepCtx(ctx, pause) != nil {
			return err
		}
	}
}

// isCluster reports whether client is a ClusterClient.
func isCluster(client redis.Scripter) bool {
	_, ok := client.(*redis.ClusterClient)
	return ok
}

// honoursDeadlines reports whether client gives up at a context's deadline.
func honoursDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}
