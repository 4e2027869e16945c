package slidelimit

// WaitQueues returns how many wait queues (one per Limiter and identity
// with waiters) the process holds: zero once every waiter has returned and
// every queue's runner has ended.
func WaitQueues() int {
	queues.mu.Lock()
	defer queues.mu.Unlock()
	return len(queues.m)
}

// Waiters returns how many waiters the queue of lim and identity holds.
func Waiters(lim *Limiter, identity string) int {
	queues.mu.Lock()
	defer queues.mu.Unlock()
	if q := queues.m[queueKey{lim, identity}]; q != nil {
		return len(q.waiters)
	}
	return 0
}
