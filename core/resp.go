package slidelimit

import (
	"errors"
	"fmt"
	"strconv"
)

// The Redis protocol (RESP2), as far as the limiter's own connections need
// it: commands are arrays of bulk strings, written straight into a
// connection's buffer; replies are parsed from a read buffer without
// allocating, except for error replies.

// appendArrayHeader appends the header of a command of n arguments.
func appendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulkHeader appends the header of a bulk string of n bytes.
func appendBulkHeader(b []byte, n int) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulk appends s as a bulk string.
func appendBulk(b []byte, s string) []byte {
	b = appendBulkHeader(b, len(s))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendBulkInt appends n as a bulk string of its decimal digits, as Redis
// reads integer arguments.
func appendBulkInt(b []byte, n int64) []byte {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	b = appendBulkHeader(b, len(d))
	b = append(b, d...)
	return append(b, '\r', '\n')
}

// appendCommand appends a command of string arguments.
func appendCommand(b []byte, args ...string) []byte {
	b = appendArrayHeader(b, len(args))
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

// replyError is an error reply of Redis, such as NOSCRIPT or CLUSTERDOWN.
// It is a redis.Error, so go-redis's helpers such as HasErrorPrefix read it.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a redis.Error.
func (replyError) RedisError() {}

// errProtocol is a reply the limiter cannot read: the connection is closed.
var errProtocol = errors.New("redis protocol error")

// line returns the length of the line starting at b[0], up to and without
// its CRLF, and whether the whole line is in b.
func line(b []byte) (int, bool) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' {
			if b[i+1] != '\n' {
				return 0, false
			}
			return i, true
		}
	}
	return 0, false
}

// parseInt reads a decimal integer of a reply line.
func parseInt(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("%w: bad integer %q", errProtocol, b)
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, fmt.Errorf("%w: bad integer", errProtocol)
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad integer %q", errProtocol, b)
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// parseIntArray parses one reply from b that should be an array of
// integers, into dst. It returns how many bytes the reply took (0 if b does
// not hold all of it yet), the integers, and the reply's error: a
// replyError for an error reply, errProtocol-wrapped for anything else
// that is not an array of integers (the reply is consumed all the same).
func parseIntArray(b []byte, dst []int64) (int, []int64, error) {
	n, ok := line(b)
	if !ok {
		return 0, dst, nil
	}
	switch b[0] {
	case '-':
		return n + 2, dst, replyError(b[1:n])
	case '*':
		count, err := parseInt(b[1:n])
		if err != nil {
			return 0, dst, err
		}
		pos := n + 2
		dst = dst[:0]
		bad := false
		for i := int64(0); i < count; i++ {
			m, ok := line(b[pos:])
			if !ok {
				return 0, dst, nil
			}
			if b[pos] != ':' {
				// Not an integer: skip whatever it is.
				k, err := skipReply(b[pos:])
				if err != nil || k == 0 {
					return 0, dst, err
				}
				pos += k
				bad = true
				continue
			}
			v, err := parseInt(b[pos+1 : pos+m])
			if err != nil {
				return 0, dst, err
			}
			dst = append(dst, v)
			pos += m + 2
		}
		if bad {
			return pos, dst, fmt.Errorf("%w: the script's reply holds a value that is not an integer", errProtocol)
		}
		return pos, dst, nil
	}
	k, err := skipReply(b)
	if err != nil || k == 0 {
		return 0, dst, err
	}
	return k, dst, fmt.Errorf("%w: unexpected reply %q", errProtocol, b[:min(n, 64)])
}

// skipReply returns how many bytes the reply at the start of b takes, or 0
// if b does not hold all of it yet. An error reply is skipped like any
// other; use replyErr to read it.
func skipReply(b []byte) (int, error) {
	n, ok := line(b)
	if !ok {
		return 0, nil
	}
	switch b[0] {
	case '+', '-', ':':
		return n + 2, nil
	case '$':
		size, err := parseInt(b[1:n])
		if err != nil {
			return 0, err
		}
		if size < 0 {
			return n + 2, nil // nil bulk
		}
		end := n + 2 + int(size) + 2
		if len(b) < end {
			return 0, nil
		}
		return end, nil
	case '*':
		count, err := parseInt(b[1:n])
		if err != nil {
			return 0, err
		}
		pos := n + 2
		for i := int64(0); i < count; i++ {
			k, err := skipReply(b[pos:])
			if err != nil || k == 0 {
				return 0, err
			}
			pos += k
		}
		return pos, nil
	}
	return 0, fmt.Errorf("%w: unknown reply type %q", errProtocol, b[0])
}

// replyErr returns the error of a whole reply b, if it is an error reply.
func replyErr(b []byte) error {
	if len(b) > 0 && b[0] == '-' {
		n, _ := line(b)
		return replyError(b[1:n])
	}
	return nil
}
