package slidelimit

// WaitQueues returns how many wait queues (one per Limiter and identity
// with waiters) the process holds: zero once every waiter has returned and
// every queue's runner has ended.
func WaitQueues() int {
	queues.mu.Lock()
	defer queues.mu.Unlock()
	return len(queues.m)
}
