package slidelimit

// LaneLoad returns how many calls wait in the queue of l's client that is
// not a cluster, and how many round trips it has out.
func LaneLoad(l *Limiter) (queued, inFlight int) {
	ln := l.disp.lane("")
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.queue), ln.inFlight
}
