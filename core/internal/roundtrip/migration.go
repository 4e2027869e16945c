package roundtrip

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// errMigrating is the failure of a call whose timeout passed while Redis
// Cluster migrated its keys' slot: the node answered TRYAGAIN to the keys'
// hash tag lately, and the call's command was still inside go-redis's own
// redirects and retries (see migrations). It wraps context.DeadlineExceeded,
// as a timeout's error always has.
var errMigrating = fmt.Errorf("no answer within the timeout while redis cluster migrated the keys' slot (TRYAGAIN): %w", context.DeadlineExceeded)

// migratingFor is how long after a TRYAGAIN to a hash tag, with no
// decision of it since, the tag is taken as still migrating.
const migratingFor = 10 * time.Second

// maxMigrating bounds how many hash tags a lane remembers as migrating.
const maxMigrating = 1024

// migrations remembers the hash tags that a node lately answered TRYAGAIN
// (or a redirect go-redis stopped following, see moving): Redis Cluster is
// migrating their slot, and holds only some of their keys on each side
// until the migration ends.
//
// go-redis's ClusterClient follows the ASK of the old node to the new one,
// which answers TRYAGAIN, and retries that itself, up to MaxRedirects times
// and pausing a backoff (8 to 72 ms by default) before each attempt, all
// inside one command. The limiter sees none of those answers: a call whose
// timeout passes inside them looks like one that Redis left unanswered.
// Knowing its tag is migrating, the lane counts such a timeout as telling
// nothing of the node (healthUnknown, errMigrating) and no silence (see
// lane.next), so that a migration never opens the breaker. The first
// timeouts of a tag, before any TRYAGAIN to it arrived, still count.
//
// A tag is forgotten at its first answer without error, or migratingFor
// after its last TRYAGAIN. It is safe for concurrent use.
type migrations struct {
	n    atomic.Int32 // len(tags), so that a lane with none costs one atomic read a call
	mu   sync.Mutex
	tags map[string]int64 // hash tag → UnixNano of its last TRYAGAIN
}

// tryAgain records that the node answered TRYAGAIN to c at now (UnixNano).
func (m *migrations) tryAgain(c *call, now int64) {
	tag := hashTag(c.cmd.FirstKey())
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tags == nil {
		m.tags = make(map[string]int64)
	}
	if _, ok := m.tags[tag]; !ok && len(m.tags) >= maxMigrating {
		for t, at := range m.tags {
			if now-at >= int64(migratingFor) {
				delete(m.tags, t)
			}
		}
		if len(m.tags) >= maxMigrating {
			return // the first timeouts of this tag count, as before any TRYAGAIN
		}
	}
	m.tags[tag] = now
	m.n.Store(int32(len(m.tags)))
}

// decided records that the node answered c without error: its tag's keys
// are together again.
func (m *migrations) decided(c *call) {
	if m.n.Load() == 0 {
		return
	}
	tag := hashTag(c.cmd.FirstKey())
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tags, tag)
	m.n.Store(int32(len(m.tags)))
}

// migrating reports whether c's tag was answered TRYAGAIN within
// migratingFor before now (UnixNano), with no decision since.
func (m *migrations) migrating(c *call, now int64) bool {
	if m.n.Load() == 0 {
		return false
	}
	tag := hashTag(c.cmd.FirstKey())
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.tags[tag]
	return ok && now-at < int64(migratingFor)
}

// hashTag returns the part of key that Redis Cluster hashes to a slot: the
// text between the first "{" and the next "}", if not empty, else key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
