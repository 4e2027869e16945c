package slidelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

// maxIdentityLen is the longest encoded identity kept readable in a key;
// longer ones are replaced by a digest.
const maxIdentityLen = 128

// DefaultPrefix is the key prefix used unless WithPrefix sets another.
const DefaultPrefix = "slidelimit:"

// Key returns the Redis key in which limit counts identity's requests, for a
// limiter with the given key prefix. It is exported for operators who
// inspect Redis; the limiter builds its keys with it.
//
// Every key of an identity starts with its stem, prefix + "{" + identity +
// "}". An exact limit (see Limit.Resolution) counts the identity's exact
// log, the stem + ":#0": a sorted set with one member per admitted request,
// its 8-byte id scored with its admission time in µs, which every exact
// limit counts whatever its quota or window (ZCOUNT key 0 +inf counts the
// requests). Scored negative, it keeps the cost of each request whose cost
// is not 1 (its id + "$", scored -3 - cost) and its records: the longest
// window and the largest quota counted in it, so that a caller with a
// shorter window does not evict history a longer one counts, and the log
// keeps about that many units; the units it holds beyond one a request; and
// once it dropped requests to stay within its quota, when the newest of
// them came (core/internal/script/exact.lua describes it). The log lives
// one to two of its longest window past its last admission.
//
// A stepped limit counts the stepped log of its step, the stem + ":#" +
// the step in µs (":#60000000" for a minute): a string of about 8.7 KB
// holding a header and a ring of one 48-bit count per step; and beside it,
// at its key + ":ids", the ids of the requests it admitted in the shorter
// of its window and 15 minutes (a sorted set scored by time; a request
// settled to another cost than it was admitted for has that cost beside
// its id), so that a retried call counts once and a settlement finds its
// step. A limit that counts requests
// (Limit.Requests) counts a log of its own, the stem + ":#req" and its
// step's suffix (":#0" if exact); an in-flight limit (Limit.InFlight) the
// sorted set of leases at the stem + ":#inflight". The levels of a
// tenant's tree (AllowTree) add "/" and the level's identity, made safe,
// after the tenant's "}". Every key of one identity, or of one tenant, is
// declared in the script calls that touch it.
//
// The identity is made safe before it enters the key. Bytes outside printable
// ASCII and the bytes '%', '{', '}' and '#' are percent-encoded, so that
// distinct identities never share a key and no identity can pick the hash
// slot of another; an encoded identity longer than 128 bytes is replaced by
// '#' and its SHA-256 digest in unpadded base64url. The braces make the
// identity the key's hash tag: the keys of one identity live on one Redis
// Cluster shard. An empty identity is an error wrapping ErrInvalidKey.
func Key(prefix, identity string, limit Limit) (string, error) {
	tag, err := hashTag(identity)
	if err != nil {
		return "", err
	}
	part := script.Part{Step: limit.Resolution().Microseconds(), Requests: limit.Requests}
	if limit.InFlight {
		part = script.Part{Step: script.InFlightStep}
	}
	return logKey(prefix, tag) + partSuffix(part), nil
}

// logKey returns the stem of the keys of the identity of hash tag tag
// (see Key).
func logKey(prefix, tag string) string {
	return prefix + "{" + tag + "}"
}

// stepSuffix returns what follows the stem in the key of its log at step
// µs: ":#" and the step in µs, such as ":#60000000" for a minute, and
// ":#0" for the exact log.
func stepSuffix(step int64) string {
	return ":#" + strconv.FormatInt(step, 10)
}

// Suffixes of the logs beside the identity's log of units: of its
// in-flight log, and of its log of requests (Limit.Requests), which a
// stepped one follows with its step suffix.
const (
	inFlightSuffix = ":#inflight"
	requestsSuffix = ":#req"
)

// idsSuffix follows a stepped log's key in the key of its ids.
const idsSuffix = ":ids"

// partSuffix returns what follows the stem in the key of part.
func partSuffix(part script.Part) string {
	s := ""
	switch {
	case part.Step == script.InFlightStep:
		return inFlightSuffix
	case part.Requests:
		s = requestsSuffix
	}
	if part.Step >= 0 {
		s += stepSuffix(part.Step)
	}
	if part.IDs {
		s += idsSuffix
	}
	return s
}

// hashTag encodes identity for use between the braces of a key.
func hashTag(identity string) (string, error) {
	if identity == "" {
		return "", fmt.Errorf("%w: identity is empty", ErrInvalidKey)
	}
	escapes := 0
	for i := 0; i < len(identity); i++ {
		if !plainByte(identity[i]) {
			escapes++
		}
	}
	if len(identity)+2*escapes > maxIdentityLen {
		sum := sha256.Sum256([]byte(identity))
		return "#" + base64.RawURLEncoding.EncodeToString(sum[:]), nil
	}
	if escapes == 0 {
		return identity, nil
	}
	const hex = "0123456789ABCDEF"
	buf := make([]byte, 0, len(identity)+2*escapes)
	for i := 0; i < len(identity); i++ {
		c := identity[i]
		if plainByte(c) {
			buf = append(buf, c)
			continue
		}
		buf = append(buf, '%', hex[c>>4], hex[c&0xF])
	}
	return string(buf), nil
}

// plainByte reports whether c may stand in a key as itself.
func plainByte(c byte) bool {
	return c > ' ' && c < 0x7F && c != '%' && c != '{' && c != '}' && c != '#'
}

// validPrefix reports whether prefix can start a key: printable ASCII with
// no braces, which would move the hash tag, and at most 64 bytes.
func validPrefix(prefix string) error {
	if len(prefix) > 64 {
		return fmt.Errorf("%w: prefix is %d bytes, more than 64", ErrInvalidOption, len(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if c <= ' ' || c >= 0x7F || c == '{' || c == '}' {
			return fmt.Errorf("%w: prefix %q may hold only printable ASCII without spaces or braces", ErrInvalidOption, prefix)
		}
	}
	return nil
}
