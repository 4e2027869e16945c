package roundtrip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// health is what one round trip tells about a Redis node.
type health int

const (
	// healthUnknown: the round trip says nothing about Redis (the caller
	// left, the queue was full, the process could not get a connection).
	healthUnknown health = iota
	// healthOK: Redis answered, even if with a script error.
	healthOK
	// healthFailed: Redis did not answer in time, refused or dropped the
	// connection, or answered that it cannot serve (CLUSTERDOWN, LOADING…).
	healthFailed
)

// errNoAnswer is the failure of a command Redis did not answer within the
// limiter's timeout after it was sent. It wraps context.DeadlineExceeded,
// as a timeout's error always has.
var errNoAnswer = fmt.Errorf("no answer from redis within the timeout: %w", context.DeadlineExceeded)

// errNodeFailed is the failure of a call that was still waiting to be sent
// when Redis left a round trip to its node unanswered for as long as the
// call's own timeout (see lane.next).
var errNodeFailed = errors.New("redis stayed silent for the call's timeout while it waited to be sent")

// errQueueFull is returned when a client's dispatcher holds as many waiting
// calls as it may.
var errQueueFull = errors.New("dispatch queue full")

// unavailablePrefixes are the replies of a Redis that cannot serve the
// limiter: now (a cluster down, a replica, a loading or busy server, full
// memory, failed persistence), or until someone changes its
// configuration (credentials or ACL rules, a full client table), which
// must open the breaker just the same rather than cost a connection or a
// command per call.
var unavailablePrefixes = []string{
	"CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "BUSY", "OOM", "MISCONF",
	"NOREPLICAS", "WRONGPASS", "NOAUTH", "NOPERM",
	// ERR replies, which redis.HasErrorPrefix reads without their "ERR ".
	"max number of clients", "AUTH", "Client sent AUTH", "invalid password", "DB index is out of range", "invalid DB index",
}

// classify tells what err, the outcome of a command the limiter sent with a
// deadline of its own, says about Redis.
func classify(err error) health {
	switch {
	case err == nil:
		return healthOK
	case errors.Is(err, errQueueFull), errors.Is(err, redis.ErrClosed), err.Error() == "redis: connection pool timeout":
		// Local: this process, not Redis. (go-redis's pool timeout is not
		// exported; it only happens when the application's own commands
		// hold every pooled connection.)
		return healthUnknown
	case errors.Is(err, errNoAnswer), errors.Is(err, context.DeadlineExceeded):
		// The only deadline on a sent command is the limiter's own.
		return healthFailed
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		if unavailableReply(err) {
			return healthFailed
		}
		return healthOK // Redis answered, with an error of the script's or the command's
	}
	return healthFailed // a network error: refused, reset, EOF, i/o timeout
}

// unavailableReply reports whether err is a Redis reply saying it cannot
// serve now.
func unavailableReply(err error) bool {
	for _, p := range unavailablePrefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// isClusterDown reports whether err says the Cluster cannot serve the slot
// now: worth sending again in a moment, within the call's bound, and a
// failure of the node's if it persists.
func isClusterDown(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "CLUSTERDOWN")
}

// isTryAgain reports whether err is TRYAGAIN: Redis Cluster is migrating
// the command's slot and holds only some of its keys, here or on the
// node it redirects to (go-redis follows ASK), until the migration ends.
// The node answered, and nothing ran: the command is worth sending again
// within its bound, and never a failure of the node's. (A TRYAGAIN still
// there when the bound passes is an error of the call's, like a script's
// error.)
func isTryAgain(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN")
}

// moving reports whether err says the command's slot is moving between
// nodes: TRYAGAIN, or, from a ClusterClient (cluster), a MOVED or ASK that
// go-redis stopped following once its MaxRedirects were spent on the
// migration's redirects and TRYAGAIN. Either way the node answered and
// nothing ran; go-redis has reloaded its slot map after the MOVED or ASK.
// A client that is not a ClusterClient never follows a redirect, so one
// sent to it again would only get it again.
func moving(err error, cluster bool) bool {
	return isTryAgain(err) || cluster && redirect(err)
}

// redirect reports whether err is a MOVED or ASK reply that go-redis did
// not follow to the end.
func redirect(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

// reloadEvery is the least time between two slot-map reloads the limiter
// asks of a ClusterClient.
const reloadEvery = 250 * time.Millisecond

// reloader makes a ClusterClient reload its slot map after failures, at
// most every reloadEvery. go-redis v9.5 reloads on MOVED and READONLY but
// not on a connection error, and otherwise only once the map is 10 s old,
// so without it the slots of a failed primary keep failing for seconds
// after its replica took over.
type reloader struct {
	cluster *redis.ClusterClient
	last    atomic.Int64 // UnixNano of the last reload asked
}

// maybe asks for a reload unless one was asked within reloadEvery.
func (r *reloader) maybe() {
	if r == nil || r.cluster == nil {
		return
	}
	now := time.Now().UnixNano()
	last := r.last.Load()
	if now-last < int64(reloadEvery) || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.cluster.ReloadState(context.Background()) // asynchronous in go-redis
}

// shouldReload reports whether err calls for a fresh slot map.
func shouldReload(err error) bool {
	return err != nil && (classify(err) == healthFailed || redirect(err))
}

// isNoScript reports whether err says Redis does not know the script.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
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
