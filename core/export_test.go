package slidelimit

import (
	"sync"

	"github.com/redis/go-redis/v9"
)

// testWires keeps every wire a test looked at alive for the whole test
// binary: a wire lives as long as a Limiter or its client holds it, and a
// test reading its counters after its last use of the Limiter must not
// find a new one.
var testWires sync.Map // redis.Scripter → *wire

// testWire returns client's wire, or nil if its limiters send through
// go-redis.
func testWire(client redis.Scripter) *wire {
	if w, ok := testWires.Load(client); ok {
		return w.(*wire)
	}
	w := wireFor(client)
	if w == nil {
		return nil
	}
	actual, _ := testWires.LoadOrStore(client, w)
	return actual.(*wire)
}

// WireSent returns how many writes, how many allow commands in them, and
// how many reads bringing replies the limiter's own connections made for
// client so far; ok is false if client's limiters send through go-redis.
func WireSent(client redis.Scripter) (writes, commands, reads int64, ok bool) {
	w := testWire(client)
	if w == nil {
		return 0, 0, 0, false
	}
	return w.nodes.writes.Load(), w.nodes.commands.Load(), w.nodes.reads.Load(), true
}

// WireScripts returns how many allow scripts Redis ran for client's
// limiters over their own connections, not counting commands answered
// NOSCRIPT.
func WireScripts(client redis.Scripter) int64 {
	w := testWire(client)
	if w == nil {
		return 0
	}
	return w.nodes.scripts.Load()
}
