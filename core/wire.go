package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/redis/go-redis/v9"
)

// The limiter's own connections.
//
// For a *redis.Client (Sentinel's included) and a *redis.ClusterClient the
// limiter sends its decisions over connections of its own, dialed with the
// client's options (its Dialer, TLS, credentials, database and client
// name), at most maxConns per Redis node. Every call is written at once,
// behind the calls already out on its connection (Redis answers a
// connection in order), and callers that write together share one write.
// Nobody waits for a batch to fill.
//
// Replies are read by the callers themselves: the caller whose reply is
// next on a connection holds the reader role; it reads, delivers every
// reply already in the buffer to its caller, and hands the role to the
// caller whose reply is next. A lone caller so writes and reads its own
// command with no goroutine in between, and a connection with nothing out
// holds no goroutine.
//
// Nothing is allocated per call once the connections are warm: commands
// are encoded into the connection's buffer, replies parsed into the call's
// own slice, and calls are pooled.
//
// A caller whose context ends leaves at once; a reply that comes later is
// read and dropped by whoever reads next, or by a goroutine of its own if
// the caller held the reader role. A connection on which Redis failed to
// answer in time, or which broke, is closed; every call out on it fails
// with it.

// maxConns is the most connections the limiter opens to one Redis node. A
// variable for tests.
var maxConns = 4

// maxConnLoad is the most calls out on one connection: beyond
// maxConns*maxConnLoad (4,608) at one instant, a node's calls are decided by
// the policy at once, with an error wrapping ErrUnavailable. A variable for
// tests.
var maxConnLoad int32 = (maxQueue + maxInFlight*maxBatch) / 4

// connIdle is how long a connection may go unused before the next call to
// its node closes it.
const connIdle = time.Minute

// pollEvery is how often a caller reading a reply checks its own context.
const pollEvery = 5 * time.Millisecond

// Call states.
const (
	cWaiting int32 = iota // written; waiting for its reply or the reader role
	cReading              // holds the reader role
	cDone                 // has its outcome
	cGone                 // its caller left: its reply is dropped
)

// Messages to a waiting call.
const (
	msgDone uint8 = iota + 1
	msgRead
)

// wcall is one command on a connection and what Redis answered.
type wcall struct {
	timeout  time.Duration
	deadline int64 // UnixNano by which Redis must answer; 0: none
	sent     int64 // UnixNano it was written
	state    atomic.Int32
	ch       chan uint8 // buffered: msgDone or msgRead

	skip     int  // replies to drop before c's own (ASKING's)
	setup    bool // c is a connection's set-up: skip replies and none of its own
	cmd      allowCmd
	batch    int  // calls whose replies come in c's batch reply, c's own first; 0: c's alone
	rider    bool // c's reply comes in an earlier call's batch reply
	reply    []int64
	err      error
	answered bool   // err, if any, is Redis's reply, not a failure to get one
	rt       uint64 // the failure's round trip, for the breaker

	// The reader's view of how late Redis may answer (see roundTrip).
	added  time.Duration
	graced bool
	meter  busyMeter
}

// wire is the limiter's transport for one go-redis client.
type wire struct {
	cluster *redis.ClusterClient // nil for a *redis.Client
	opt     *redis.Options       // a *redis.Client's options; nil for a cluster
	reload  *reloader
	nodes   *wireNodes
	single  atomic.Pointer[wnode] // a *redis.Client's one node, once known
	calls   sync.Pool
}

// wireNodes are the nodes of one wire, apart from the wire so that a
// cleanup can close them once the wire is garbage.
type wireNodes struct {
	mu    sync.Mutex
	nodes map[string]*wnode

	closed   atomic.Pointer[uint32] // the client's closed flag (see closedFlag); nil until known
	watching bool                   // watch runs; under mu

	// What the connections did, for tests: writes, reads that brought
	// replies, allow commands sent, the allow scripts Redis ran (not those
	// it answered NOSCRIPT), and the allow calls sent in batches.
	writes, reads, commands, scripts, batched atomic.Int64
}

// wires holds one wire per client, weakly, so a client that is garbage
// takes its connections with it.
var wires sync.Map // weak.Pointer[redis.Client] or weak.Pointer[redis.ClusterClient] → weak.Pointer[wire]

var wiresMu sync.Mutex

// wireFor returns client's wire, or nil if the limiter must send through
// go-redis: for a client that is not a *redis.Client or a
// *redis.ClusterClient, or whose options ask for what the limiter's own
// connections do not do (OnConnect, credentials it cannot read).
func wireFor(client redis.Scripter) *wire {
	var key any
	w := &wire{nodes: &wireNodes{nodes: make(map[string]*wnode)}}
	switch c := client.(type) {
	case *redis.Client:
		if !plainOptions(c.Options()) {
			return nil
		}
		flag := closedFlag(c)
		if flag == nil {
			return nil
		}
		key, w.opt = weak.Make(c), c.Options()
		w.nodes.closed.Store(flag)
	case *redis.ClusterClient:
		o := c.Options()
		if o.OnConnect != nil || !plainCredentials(reflect.ValueOf(o).Elem()) {
			return nil
		}
		key, w.cluster, w.reload = weak.Make(c), c, &reloader{cluster: c}
	default:
		return nil
	}
	wiresMu.Lock()
	defer wiresMu.Unlock()
	if v, ok := wires.Load(key); ok {
		if existing := v.(weak.Pointer[wire]).Value(); existing != nil {
			return existing
		}
	}
	runtime.AddCleanup(w, func(n *wireNodes) { n.closeAll() }, w.nodes)
	wires.Store(key, weak.Make(w))
	return w
}

// closedFlag returns the flag go-redis sets when client is closed, or nil
// if this version of go-redis keeps it where the limiter cannot find it.
// The limiter reads it on every call, so that closing the client closes
// the limiter's connections and fails its calls with redis.ErrClosed, as
// the client's own commands do.
func closedFlag(client *redis.Client) (flag *uint32) {
	defer func() {
		if recover() != nil {
			flag = nil
		}
	}()
	v := reflect.ValueOf(client).Elem().FieldByName("baseClient")
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	pool := v.Elem().FieldByName("connPool")
	if pool.Kind() != reflect.Interface || pool.IsNil() {
		return nil
	}
	p := pool.Elem()
	if p.Kind() != reflect.Pointer || p.IsNil() || p.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := p.Elem().FieldByName("_closed")
	switch {
	case f.Kind() == reflect.Uint32:
	case f.Kind() == reflect.Struct && f.Type().Size() == 4 && f.Type().PkgPath() == "sync/atomic":
	default:
		return nil
	}
	return (*uint32)(unsafe.Pointer(f.UnsafeAddr()))
}

// isClosed reports whether the client was closed; it then closes every
// connection of w.
func (w *wire) isClosed() bool {
	if !w.nodes.clientClosed() {
		return false
	}
	w.nodes.closeAll()
	return true
}

// plainOptions reports whether the limiter's own connections can do what
// opt asks of a connection.
func plainOptions(opt *redis.Options) bool {
	return opt.OnConnect == nil && opt.Dialer != nil && plainCredentials(reflect.ValueOf(opt).Elem())
}

// plainCredentials reports whether options v (a go-redis Options or
// ClusterOptions) hold no credentials source the limiter cannot read: newer
// go-redis versions add ones, such as a streaming provider, that it leaves
// to go-redis.
func plainCredentials(v reflect.Value) bool {
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		if !strings.Contains(name, "Credentials") || name == "CredentialsProvider" || name == "CredentialsProviderContext" {
			continue
		}
		if f := v.Field(i); !f.IsZero() {
			return false
		}
	}
	return true
}

// clientClosed reports whether the client was closed.
func (ns *wireNodes) clientClosed() bool {
	flag := ns.closed.Load()
	return flag != nil && atomic.LoadUint32(flag) != 0
}

// watchEvery is how often watch looks at the connections.
const watchEvery = 100 * time.Millisecond

// watch runs while ns has connections: it closes them all once the client
// is closed, and each once it has been unused for connIdle. It holds no
// reference to the wire, which may so become garbage and close them too.
func (ns *wireNodes) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for range t.C {
		if ns.clientClosed() {
			ns.closeAll()
		}
		ns.mu.Lock()
		nodes := make([]*wnode, 0, len(ns.nodes))
		for _, n := range ns.nodes {
			nodes = append(nodes, n)
		}
		ns.mu.Unlock()
		open := 0
		for _, n := range nodes {
			open += n.closeIdle(connIdle)
		}
		ns.mu.Lock()
		if open == 0 {
			ns.watching = false
			ns.mu.Unlock()
			return
		}
		ns.mu.Unlock()
	}
}

// opened starts watch unless it runs.
func (ns *wireNodes) opened() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if !ns.watching {
		ns.watching = true
		go ns.watch()
	}
}

// closeAll closes every connection; the calls out on them fail.
func (ns *wireNodes) closeAll() {
	ns.mu.Lock()
	nodes := ns.nodes
	ns.nodes = map[string]*wnode{}
	ns.mu.Unlock()
	for _, n := range nodes {
		n.mu.Lock()
		conns := n.conns
		n.conns = nil
		n.mu.Unlock()
		for _, cn := range conns {
			cn.fail(redis.ErrClosed)
		}
	}
}

// node returns the node that serves tag, an identity's hash tag (it holds
// no braces, so it hashes to its keys' slot).
func (w *wire) node(ctx context.Context, tag string) (*wnode, error) {
	if w.cluster == nil {
		// One node: found once, not under a lock on every call.
		if n := w.single.Load(); n != nil {
			return n, nil
		}
		n := w.nodeAt(w.opt.Addr, w.opt, true)
		w.single.Store(n)
		return n, nil
	}
	c, err := w.cluster.MasterForKey(ctx, tag)
	if err != nil {
		return nil, err
	}
	if w.nodes.closed.Load() == nil {
		// Closing a ClusterClient closes every node's client.
		flag := closedFlag(c)
		if flag == nil {
			flag = new(uint32) // never set: the ClusterClient's own errors tell
		}
		w.nodes.closed.CompareAndSwap(nil, flag)
	}
	opt := c.Options()
	return w.nodeAt(opt.Addr, opt, false), nil
}

// nodeAt returns the node at addr, dialed with opt (whose Addr is
// ignored); batches says whether it decides several identities in one
// script call (a standalone server: a cluster node runs a script on one
// slot only).
func (w *wire) nodeAt(addr string, opt *redis.Options, batches bool) *wnode {
	ns := w.nodes
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := ns.nodes[addr]
	if n == nil {
		n = &wnode{addr: addr, opt: opt, counts: ns, batches: batches}
		ns.nodes[addr] = n
	}
	return n
}

func (w *wire) get() *wcall {
	if c, ok := w.calls.Get().(*wcall); ok {
		return c
	}
	return &wcall{ch: make(chan uint8, 1)}
}

// put returns c to the pool; only a call no connection holds any more.
func (w *wire) put(c *wcall) {
	c.reply, c.err, c.rt, c.cmd = c.reply[:0], nil, 0, allowCmd{}
	w.calls.Put(c)
}

// wnode is one Redis node's connections.
type wnode struct {
	addr     string
	opt      *redis.Options
	counts   *wireNodes
	batches  bool         // allow commands go out in batches (see closeBatch)
	answered atomic.Int64 // UnixNano of Redis's last answer on any connection

	mu      sync.Mutex
	conns   []*wconn
	dialing chan struct{} // closed when the dial under way ends; nil if none
	dialRT  uint64        // the dial's round trip, for the breaker
	dialErr error         // the last dial's error
}

// conn returns a connection to send on: an idle one, else a new one while
// fewer than maxConns are open, else the least loaded. While the node has
// no connection, callers wait for the one being dialed as long as they
// would wait for Redis's answer (see readMore); a failed dial fails them as
// one round trip, rt.
func (n *wnode) conn(ctx context.Context, timeout time.Duration) (cn *wconn, rt uint64, err error) {
	for {
		n.mu.Lock()
		var best *wconn
		for _, cn := range n.conns {
			if best == nil || cn.load.Load() < best.load.Load() {
				best = cn
			}
		}
		if best != nil && best.load.Load() >= maxConnLoad {
			n.mu.Unlock()
			return nil, 0, errQueueFull
		}
		if best != nil {
			// Every connection has calls out: open one more for the next
			// callers, and send on the least loaded meanwhile.
			if best.load.Load() > 0 && len(n.conns) < maxConns && n.dialing == nil {
				n.startDial()
			}
			n.mu.Unlock()
			return best, 0, nil
		}
		wait, rt := n.dialing, n.dialRT
		if wait == nil {
			wait, rt = n.startDial(), n.dialRT
		}
		n.mu.Unlock()
		if err := waitDial(ctx, wait, timeout); err != nil {
			// Each caller that gave up on the dial is a failed round trip
			// of its own: a dial that never ends must still open the
			// breaker.
			return nil, roundTrips.Add(1), err
		}
		n.mu.Lock()
		err := n.dialErr
		open := len(n.conns) > 0
		n.mu.Unlock()
		if !open {
			if err == nil {
				err = net.ErrClosed
			}
			return nil, rt, err
		}
	}
}

// errNoConn is the failure of a call that found no connection to its
// Redis node within its timeout.
var errNoConn = fmt.Errorf("no connection to redis within the timeout: %w", context.DeadlineExceeded)

// waitDial waits for done, a dial's end, for the call's timeout plus the
// busy-host allowance, or until ctx ends. A connect takes a moment on a host
// with CPU to spare; when it takes longer, the dialing goroutine has most
// likely not run, starved by this process's own callers, so the wait does
// not judge Redis by the timeout alone. A host that does not answer the
// connect at all so costs the first callers up to the allowance more; the
// breaker then opens.
func waitDial(ctx context.Context, done <-chan struct{}, timeout time.Duration) error {
	select {
	case <-done:
		return nil
	default:
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout + busyAllowance)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return errNoConn
	}
}

// startDial opens a connection on a goroutine of its own and returns the
// channel closed when it is done. n.mu is held.
func (n *wnode) startDial() chan struct{} {
	done := make(chan struct{})
	n.dialing, n.dialRT = done, roundTrips.Add(1)
	go func() {
		cn, err := n.dial()
		n.mu.Lock()
		n.dialing, n.dialErr = nil, err
		if err == nil {
			n.conns = append(n.conns, cn)
		}
		n.mu.Unlock()
		if err == nil {
			n.counts.opened()
		}
		close(done)
	}()
	return done
}

// dial opens a connection within the client's DialTimeout, with its set-up
// commands (see hello) waiting in its buffer: they go out with the first
// calls, and a call waits for nothing but the connect.
func (n *wnode) dial() (*wconn, error) {
	opt := n.opt
	bound := opt.DialTimeout
	if bound <= 0 {
		bound = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	network := opt.Network
	if network == "" {
		network = "tcp"
	}
	nc, err := opt.Dialer(ctx, network, n.addr)
	if err != nil {
		return nil, err
	}
	cn := &wconn{node: n, nc: nc, rbuf: make([]byte, 4096)}
	cn.used.Store(time.Now().UnixNano())
	if err := cn.hello(ctx, bound); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return cn, nil
}

// hello puts the commands that prepare a new connection in its buffer,
// ahead of any call: AUTH, SELECT and CLIENT SETNAME as the options ask,
// and SCRIPT LOAD. A set-up error, such as WRONGPASS, fails the connection
// and every call sent on it; Redis answers within bound, or the connection
// is abandoned like any other.
func (cn *wconn) hello(ctx context.Context, bound time.Duration) error {
	opt := cn.node.opt
	user, pass := opt.Username, opt.Password
	switch {
	case opt.CredentialsProviderContext != nil:
		var err error
		if user, pass, err = opt.CredentialsProviderContext(ctx); err != nil {
			return err
		}
	case opt.CredentialsProvider != nil:
		user, pass = opt.CredentialsProvider()
	}
	var b []byte
	replies := 0
	if pass != "" {
		if user != "" {
			b = appendCommand(b, "AUTH", user, pass)
		} else {
			b = appendCommand(b, "AUTH", pass)
		}
		replies++
	}
	if opt.DB != 0 {
		b = appendCommand(b, "SELECT", strconv.Itoa(opt.DB))
		replies++
	}
	if opt.ClientName != "" {
		b = appendCommand(b, "CLIENT", "SETNAME", opt.ClientName)
		replies++
	}
	// Load the allow script, so that calls on a new connection (a first
	// use, a restarted or promoted Redis) meet no NOSCRIPT. Its error is
	// not the connection's: a Redis that refuses SCRIPT LOAD gets the
	// script by EVAL at the first NOSCRIPT.
	b = appendCommand(b, "SCRIPT", "LOAD", allowSource)
	replies++
	h := &wcall{skip: replies, setup: true, timeout: bound, deadline: time.Now().Add(bound).UnixNano()}
	h.state.Store(cGone) // nobody waits for it
	cn.wbuf, cn.pending = b, []*wcall{h}
	return nil
}

// closeIdle closes every connection unused for d, and returns how many
// stay open or are being dialed.
func (n *wnode) closeIdle(d time.Duration) int {
	n.mu.Lock()
	var gone []*wconn
	now := time.Now().UnixNano()
	for i := 0; i < len(n.conns); i++ {
		cn := n.conns[i]
		if cn.load.Load() == 0 && now-cn.used.Load() >= int64(d) {
			gone = append(gone, cn)
			n.conns = append(n.conns[:i], n.conns[i+1:]...)
			i--
		}
	}
	open := len(n.conns)
	if n.dialing != nil {
		open++
	}
	n.mu.Unlock()
	for _, cn := range gone {
		cn.fail(net.ErrClosed)
	}
	return open
}

// remove forgets cn.
func (n *wnode) remove(cn *wconn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, c := range n.conns {
		if c == cn {
			n.conns = append(n.conns[:i], n.conns[i+1:]...)
			return
		}
	}
}

// wconn is one connection of the limiter's own.
type wconn struct {
	node *wnode
	nc   net.Conn
	load atomic.Int32 // calls out
	used atomic.Int64 // UnixNano of the last write

	mu       sync.Mutex
	wbuf     []byte   // commands not yet written
	open     []*wcall // allow calls not yet encoded: the batch being gathered
	spare    []byte
	flushing bool
	pending  []*wcall // calls written or being written, in order
	head     int      // pending[head] is the next reply's
	reader   bool     // a goroutine holds the reader role
	waiting  bool     // the reader waits on the network
	dead     error    // why the connection failed; nil while it works
	deadRT   uint64

	// The reader role's own.
	scratch []int64 // the reply being parsed
	rbuf    []byte
	r, w    int
}

// send writes cmd for c, and returns whether c now holds the reader role.
// It returns an error if the connection failed before.
func (cn *wconn) send(c *wcall, cmd allowCmd) (bool, error) {
	cn.mu.Lock()
	if cn.dead != nil {
		cn.mu.Unlock()
		return false, cn.dead
	}
	c.batch, c.rider = 0, false
	if cn.node.batches && !cmd.eval && !cmd.asking {
		c.cmd = cmd
		cn.open = append(cn.open, c)
		if len(cn.open) == wireBatch {
			cn.closeBatch()
		}
	} else {
		cn.closeBatch()
		cn.wbuf = cmd.append(cn.wbuf)
	}
	at := time.Now().UnixNano()
	c.sent = at
	if c.timeout <= 0 {
		c.timeout = max(cn.node.opt.ReadTimeout, 0) // no timeout of the limiter's: the client's
	}
	c.deadline = 0
	if c.timeout > 0 {
		c.deadline = at + int64(c.timeout)
	}
	c.added, c.graced, c.answered = 0, false, false
	c.meter = recentMeter()
	cn.pending = append(cn.pending, c)
	cn.node.counts.commands.Add(1)
	cn.load.Add(1)
	cn.used.Store(at)
	role := !cn.reader
	if role {
		cn.reader = true
		c.state.Store(cReading)
	} else {
		c.state.Store(cWaiting)
	}
	// Write now if the reader waits on the network, and so will not write
	// before a reply comes, while few calls are out; or if the buffer is
	// large. Otherwise the reader writes it, together with what else
	// comes, before it next waits: Redis is busy with the calls ahead and
	// would read it only after answering them anyway.
	now := cn.waiting && int(cn.load.Load()) <= eagerLoad || len(cn.wbuf) >= maxUnflushed
	cn.mu.Unlock()
	if now {
		cn.flush()
	}
	return role, nil
}

// wireBatch is the most allow calls one batch command decides.
const wireBatch = 32

// closeBatch encodes the allow calls gathered into the write buffer: a
// lone call as its own command, several as one batch, whose one reply the
// reader hands out in order. cn.mu is held.
func (cn *wconn) closeBatch() {
	switch len(cn.open) {
	case 0:
		return
	case 1:
		cn.wbuf = cn.open[0].cmd.append(cn.wbuf)
	default:
		cn.node.counts.batched.Add(int64(len(cn.open)))
		cn.wbuf = appendBatch(cn.wbuf, cn.open)
		cn.open[0].batch = len(cn.open)
		for _, c := range cn.open[1:] {
			c.rider = true
		}
	}
	clear(cn.open)
	cn.open = cn.open[:0]
}

// eagerLoad is the most calls out on a connection, a new one included,
// for which a call is written at once while the reader waits for Redis.
const eagerLoad = 8

// maxUnflushed is the most bytes of commands the write buffer holds before
// their caller writes them; below it, the reader writes them before it next
// waits for Redis.
const maxUnflushed = 64 << 10

// writeBound is the longest a write may block: Redis not reading its
// socket is a failure.
const writeBound = time.Second

// flush writes the buffer until it stays empty, unless another goroutine
// is writing it.
func (cn *wconn) flush() {
	cn.mu.Lock()
	if cn.flushing {
		cn.mu.Unlock()
		return
	}
	cn.flushing = true
	cn.mu.Unlock()
	for {
		cn.mu.Lock()
		cn.closeBatch()
		if len(cn.wbuf) == 0 || cn.dead != nil {
			cn.flushing = false
			cn.mu.Unlock()
			return
		}
		buf := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.spare = nil
		cn.mu.Unlock()
		_ = cn.nc.SetWriteDeadline(time.Now().Add(writeBound))
		_, err := cn.nc.Write(buf)
		cn.node.counts.writes.Add(1)
		cn.mu.Lock()
		cn.spare = buf[:0]
		cn.mu.Unlock()
		if err != nil {
			cn.fail(err)
			cn.mu.Lock()
			cn.flushing = false
			cn.mu.Unlock()
			return
		}
	}
}

// wait waits for c's reply; c was sent on cn. It returns when c has its
// outcome, or with ctx's error when ctx ends first.
func (cn *wconn) wait(ctx context.Context, c *wcall, role bool) error {
	if !role {
		select {
		case m := <-c.ch:
			if m == msgDone {
				return nil
			}
		case <-ctx.Done():
			if c.state.CompareAndSwap(cWaiting, cGone) {
				return ctx.Err()
			}
			if m := <-c.ch; m == msgDone {
				return nil
			}
			// Handed the reader role while leaving: pass it on.
			c.state.Store(cGone)
			go func() { _ = cn.read(context.Background(), nil) }()
			return ctx.Err()
		}
	}
	return cn.read(ctx, c)
}

// fill reads more of the connection into the read buffer.
func (cn *wconn) fill() error {
	if cn.r == cn.w {
		cn.r, cn.w = 0, 0
	} else if cn.w == len(cn.rbuf) {
		if cn.r > 0 {
			cn.w = copy(cn.rbuf, cn.rbuf[cn.r:cn.w])
			cn.r = 0
		} else {
			grown := make([]byte, 2*len(cn.rbuf))
			cn.w = copy(grown, cn.rbuf[cn.r:cn.w])
			cn.r, cn.rbuf = 0, grown
		}
	}
	k, err := cn.nc.Read(cn.rbuf[cn.w:])
	cn.w += k
	if k > 0 {
		cn.node.counts.reads.Add(1)
		return nil
	}
	return err
}

// read holds the reader role: it delivers replies in order until self's
// (self is nil for a goroutine that reads the replies of callers who left),
// and every other reply already read; then it hands the role to the caller
// whose reply is next, so that the callers of one write wake together
// rather than one after another. It returns self's error, or ctx's if ctx
// ended first.
func (cn *wconn) read(ctx context.Context, self *wcall) error {
	mine := false // self's reply is read
	for {
		var h *wcall
		// Deliver every reply already read.
		for {
			cn.mu.Lock()
			if cn.dead != nil {
				err, rt := cn.dead, cn.deadRT
				cn.mu.Unlock()
				if mine {
					return self.err
				}
				if self != nil {
					self.err, self.rt = err, rt
				}
				return err
			}
			if cn.head == len(cn.pending) {
				cn.reader = false
				cn.mu.Unlock()
				if mine {
					return self.err
				}
				return nil // a drainer with nothing left
			}
			h = cn.pending[cn.head]
			batch := h.batch // set under cn.mu when the batch closes
			cn.mu.Unlock()
			if h.skip > 0 {
				// A reply to drop before h's own: ASKING's, or one of a
				// connection's set-up.
				k, err := skipReply(cn.rbuf[cn.r:cn.w])
				if err != nil {
					cn.fail(err)
					continue
				}
				if k == 0 {
					break // read more
				}
				rerr := replyErr(cn.rbuf[cn.r : cn.r+k])
				cn.r += k
				h.skip--
				if !h.setup {
					continue
				}
				if rerr != nil && h.skip > 0 { // SCRIPT LOAD's, the last, may fail
					cn.fail(fmt.Errorf("redis connection set-up: %w", rerr))
					continue
				}
				if h.skip == 0 {
					cn.mu.Lock()
					cn.pop()
					cn.mu.Unlock()
				}
				continue
			}
			if batch > 1 {
				k, err := cn.deliverBatch(batch, self)
				if err != nil {
					cn.fail(err) // unreadable
					continue
				}
				if k == 0 {
					break // read more
				}
				if k < 0 {
					mine = true
				}
				continue
			}
			k, reply, err := parseIntArray(cn.rbuf[cn.r:cn.w], cn.scratch[:0])
			if k == 0 && err == nil {
				break // read more
			}
			if k == 0 {
				cn.fail(err) // unreadable
				continue
			}
			cn.r += k
			cn.node.answered.Store(time.Now().UnixNano())
			if cn.deliver(h, self, reply, err) {
				mine = true
			}
		}
		// h's reply is not all read yet.
		if self == nil || mine {
			if cn.handTo(h) {
				if mine {
					return self.err
				}
				return nil
			}
			if mine {
				// h's caller left, or h is a connection's set-up: a
				// goroutine of its own reads on.
				go func() { _ = cn.read(context.Background(), nil) }()
				return self.err
			}
		}
		if err := cn.readMore(ctx, self); err != nil {
			return err
		}
	}
}

// deliver forgets h, whose reply was just read, and hands h's caller the
// reply; it reports whether h is self, the reader's own call.
func (cn *wconn) deliver(h, self *wcall, reply []int64, err error) bool {
	cn.mu.Lock()
	cn.pop()
	cn.load.Add(-1)
	cn.mu.Unlock()
	cn.scratch = reply[:0] // keep what parsing grew
	// The reply is copied into h's own slice only once h is this reader's
	// to answer: a call whose connection failed may already be resent on
	// another, whose reader answers it.
	if h == self {
		self.reply, self.err, self.answered = append(self.reply[:0], reply...), err, true
		return true
	}
	if h.state.CompareAndSwap(cWaiting, cDone) {
		h.reply, h.err, h.answered = append(h.reply[:0], reply...), err, true
		h.ch <- msgDone
	}
	return false
}

// deliverBatch reads the reply of a batch of n calls, the next n due, and
// hands each its own part: its decision, or its error; an error reply to
// the whole command (NOSCRIPT, say) goes to all n. It returns 0 if the
// reply is not all read yet, -1 if self's reply was among them, else 1; or
// the error that makes the connection unreadable.
func (cn *wconn) deliverBatch(n int, self *wcall) (int, error) {
	b := cn.rbuf[cn.r:cn.w]
	size, err := skipReply(b)
	if err != nil || size == 0 {
		return 0, err
	}
	b = b[:size]
	all := replyErr(b)
	pos := 0
	if all == nil {
		if b[0] != '*' {
			return 0, fmt.Errorf("%w: a batch's reply is not an array: %q", errProtocol, b[:min(len(b), 64)])
		}
		m, _ := line(b)
		count, err := parseInt(b[1:m])
		if err != nil || count != int64(n) {
			return 0, fmt.Errorf("%w: a batch of %d calls got %d replies", errProtocol, n, count)
		}
		pos = m + 2
	}
	cn.r += size
	cn.node.answered.Store(time.Now().UnixNano())
	mine := false
	for range n {
		cn.mu.Lock()
		h := cn.pending[cn.head]
		cn.mu.Unlock()
		reply, err := cn.scratch[:0], all
		if all == nil {
			var k int
			k, reply, err = parseIntArray(b[pos:], reply)
			if k == 0 {
				k, _ = skipReply(b[pos:]) // whole: b was skipped whole
				err = fmt.Errorf("%w: a batch's reply holds an unreadable part", errProtocol)
			}
			pos += k
		}
		if cn.deliver(h, self, reply, err) {
			mine = true
		}
	}
	if mine {
		return -1, nil
	}
	return 1, nil
}

// pop forgets the call whose reply was just read. cn.mu is held.
func (cn *wconn) pop() {
	cn.pending[cn.head] = nil
	cn.head++
	if cn.head == len(cn.pending) {
		cn.pending, cn.head = cn.pending[:0], 0
	}
}

// handTo hands a drainer's reader role to h, the call whose reply is next,
// if its caller still waits.
func (cn *wconn) handTo(h *wcall) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.dead == nil && h.state.CompareAndSwap(cWaiting, cReading) {
		h.ch <- msgRead
		return true
	}
	return false
}

// judged returns the call whose deadline bounds Redis's silence on cn: the
// one due soonest of those whose callers wait, or the next reply's if none
// waits; nil if no reply is due.
func (cn *wconn) judged() *wcall {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.head == len(cn.pending) || cn.dead != nil {
		return nil
	}
	var soonest *wcall
	for _, c := range cn.pending[cn.head:] {
		if c.state.Load() != cGone && c.deadline != 0 && (soonest == nil || c.deadline < soonest.deadline) {
			soonest = c
		}
	}
	if soonest == nil {
		return cn.pending[cn.head]
	}
	return soonest
}

// readMore reads from the connection for the replies due, bounding
// Redis's silence by the deadline of the call judged() (see roundTrip for how a busy
// process or host extends it). It returns nil once bytes came, or the
// error that ends self's wait.
func (cn *wconn) readMore(ctx context.Context, self *wcall) error {
	for {
		h := cn.judged()
		if h == nil {
			return nil
		}
		dl := h.deadline
		next := dl
		if self != nil && ctx.Done() != nil {
			if poll := time.Now().Add(pollEvery).UnixNano(); next == 0 || poll < next {
				next = poll
			}
		}
		// A deadline already past would fail the read without trying it:
		// the replies may be there, unread while this goroutine waited to
		// run, so the read gets a moment.
		if soon := time.Now().Add(promptly).UnixNano(); next != 0 && next < soon {
			next = soon
		}
		var t time.Time
		if next != 0 {
			t = time.Unix(0, next)
		}
		// The commands written since the last read go out together, now,
		// while the reader waits for Redis.
		cn.flush()
		_ = cn.nc.SetReadDeadline(t)
		cn.mu.Lock()
		cn.waiting = true
		cn.mu.Unlock()
		err := cn.fill()
		cn.mu.Lock()
		cn.waiting = false
		cn.mu.Unlock()
		if err == nil {
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			cn.fail(err)
			return nil // read delivers the failure
		}
		if self != nil && ctx.Err() != nil {
			// The caller leaves; a goroutine of its own reads on.
			self.state.Store(cGone)
			go func() { _ = cn.read(context.Background(), nil) }()
			return ctx.Err()
		}
		now := time.Now().UnixNano()
		if dl == 0 || now < dl {
			continue
		}
		late := time.Duration(now - next)
		if h.meter.busy() {
			late = max(late, busyStep)
		}
		answered := cn.node.answered.Load()
		switch {
		case now-answered < int64(h.timeout) && answered > h.sent:
			// Redis answers other connections, and this one waits behind
			// them in Redis: busy, not failing.
			h.deadline = answered + int64(h.timeout)
		case late > promptly && h.added < busyAllowance:
			h.added += late
			h.deadline = now + int64(late)
		case !h.graced:
			h.graced = true
			h.deadline = now + int64(promptly)
		default:
			cn.abandon()
			return nil
		}
	}
}

// drainBound is how long an abandoned connection waits for the replies
// still due before it is closed.
const drainBound = 3 * time.Second

// abandon fails every call out on cn with errNoAnswer, as one failed round
// trip, and takes cn out of use; a goroutine of its own reads the replies
// still due, for up to drainBound, before closing it. Closing it at once
// would leave Redis, or a proxy between, writing replies nobody reads. Only
// the reader role calls it.
func (cn *wconn) abandon() {
	cn.mu.Lock()
	due := -len(cn.open) // not written: no reply is due
	for _, c := range cn.pending[cn.head:] {
		due += c.skip
		if !c.setup && !c.rider {
			due++ // its own, or its batch's
		}
	}
	cn.mu.Unlock()
	cn.failAnd(errNoAnswer, false)
	go func() {
		defer cn.nc.Close()
		_ = cn.nc.SetReadDeadline(time.Now().Add(drainBound))
		for due > 0 {
			k, err := skipReply(cn.rbuf[cn.r:cn.w])
			if err != nil {
				return
			}
			if k > 0 {
				cn.r += k
				due--
				continue
			}
			if cn.fill() != nil {
				return
			}
		}
	}()
}

// fail closes cn for cause: every call out on it fails with cause, as one
// failed round trip.
func (cn *wconn) fail(cause error) {
	cn.failAnd(cause, true)
}

// failAnd is fail, closing the connection only if close is set.
func (cn *wconn) failAnd(cause error, close bool) {
	cn.mu.Lock()
	if cn.dead != nil {
		cn.mu.Unlock()
		return
	}
	rt := roundTrips.Add(1)
	cn.dead, cn.deadRT = cause, rt
	calls := cn.pending[cn.head:]
	cn.pending, cn.head = nil, 0
	clear(cn.open)
	cn.open = cn.open[:0]
	cn.load.Store(0)
	cn.mu.Unlock()
	if close {
		_ = cn.nc.Close()
	}
	cn.node.remove(cn)
	for _, c := range calls {
		if c.state.CompareAndSwap(cWaiting, cDone) {
			c.err, c.rt = cause, rt
			c.ch <- msgDone
		}
	}
}

// staleConn reports whether err is the failure of a connection that may
// have gone stale while idle (closed by Redis, a restart or a proxy), so
// that the call is worth sending once more on a fresh one.
func staleConn(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op == "dial" {
		return false
	}
	s := oe.Err.Error()
	return strings.Contains(s, "reset") || strings.Contains(s, "broken pipe")
}
