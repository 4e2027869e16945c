package slidelimit

import "github.com/redis/go-redis/v9"

// WireSent returns how many writes, how many allow commands in them, and
// how many reads bringing replies the limiter's own connections made for
// client so far; ok is false if client's limiters send through go-redis.
func WireSent(client redis.Scripter) (writes, commands, reads int64, ok bool) {
	w := wireFor(client)
	if w == nil {
		return 0, 0, 0, false
	}
	return w.nodes.writes.Load(), w.nodes.commands.Load(), w.nodes.reads.Load(), true
}

// WireScripts returns how many allow scripts Redis ran for client's
// limiters over their own connections, not counting commands answered
// NOSCRIPT.
func WireScripts(client redis.Scripter) int64 {
	w := wireFor(client)
	if w == nil {
		return 0
	}
	return w.nodes.scripts.Load()
}
