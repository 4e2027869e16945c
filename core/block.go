package slidelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

// blockSuffix ends an identity's block key. The '!' keeps it apart from
// every limit's key: a limit's name may not hold one, and an unnamed
// limit's key ends in its quota and window.
const blockSuffix = "}:!blocked"

// MaxBlock is the longest block Block records; longer ones are shortened
// to it, so that a partner's mistaken Retry-After cannot stop a fleet for
// days.
const MaxBlock = time.Hour

// Block stops identity's requests through Wait and WaitN for d, in every
// process that shares l's Redis and key prefix: they wait until the block
// has ended, then ask the limits as usual. It is how a partner's own
// throttle (an HTTP 429 with Retry-After, a gRPC RetryInfo) is obeyed by a
// whole fleet at once rather than discovered again by every worker; the
// outbound adapters (httplimit.Transport, grpclimit's client interceptors)
// call it for you.
//
// The block is one Redis key beside identity's logs, prefix + "{" +
// identity + "}:!blocked", with the identity made safe as Key describes,
// holding the Redis time in microseconds at which the block began; it
// expires by Redis's clock when the block ends. A block is only ever
// lengthened: a shorter Block while a longer one is in force changes
// nothing. d is cut to MaxBlock; d of zero or less does nothing. Block
// ignores WithClock and leaves Allow, AllowN and Peek unchanged: it pauses
// waiters, it is not a limit. Reset does not lift it; it ends by itself.
//
// Errors wrap ErrUnavailable or ErrInvalidKey.
func (l *Limiter) Block(ctx context.Context, identity string, d time.Duration) error {
	key, err := l.blockKey(identity)
	if err != nil || d <= 0 {
		return err
	}
	ms := min(d, MaxBlock).Milliseconds()
	if ms < 1 {
		ms = 1
	}
	err = l.rt.Run(ctx, func(ctx context.Context) error {
		return script.Block.Run(ctx, l.client, []string{key}, ms).Err()
	})
	if err != nil {
		return fmt.Errorf("%w: block script: %w", ErrUnavailable, err)
	}
	return nil
}

// Blocked returns how long identity's block (see Block) has left, or zero
// when none is in force. Errors wrap ErrUnavailable or ErrInvalidKey.
func (l *Limiter) Blocked(ctx context.Context, identity string) (time.Duration, error) {
	key, err := l.blockKey(identity)
	if err != nil {
		return 0, err
	}
	var ms int64
	err = l.rt.Run(ctx, func(ctx context.Context) error {
		var err error
		ms, err = script.Blocked.Run(ctx, l.client, []string{key}).Int64()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%w: blocked script: %w", ErrUnavailable, err)
	}
	return time.Duration(max(ms, 0)) * time.Millisecond, nil
}

// blockKey returns identity's block key.
func (l *Limiter) blockKey(identity string) (string, error) {
	tag, err := hashTag(identity)
	if err != nil {
		return "", err
	}
	return l.cfg.prefix + "{" + tag + blockSuffix, nil
}
