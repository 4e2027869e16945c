package adapter

import "slices"

// MaxBody is how many bytes of a response's body an adapter keeps for a
// settle function (Flow.Settle): the last 64 KiB. That holds an
// OpenAI-compatible JSON response's usage, at its end, and a streamed
// one's last data chunks, whatever the length of the body before them.
const MaxBody = 64 << 10

// tail keeps the last MaxBody bytes written to it. Its buffer grows with
// what is written, up to MaxBody, and then turns into a ring.
type tail struct {
	buf  []byte // at most MaxBody bytes; once full, the oldest is at next
	next int
	size int64 // the bytes written in all
}

// Write appends b, dropping the oldest bytes beyond MaxBody.
func (t *tail) Write(b []byte) {
	t.size += int64(len(b))
	if len(b) > MaxBody {
		b = b[len(b)-MaxBody:]
	}
	if n := len(t.buf); n < MaxBody {
		k := min(len(b), MaxBody-n)
		if cap(t.buf)-n < k {
			grown := make([]byte, n, min(max(2*cap(t.buf), n+k, 512), MaxBody))
			copy(grown, t.buf)
			t.buf = grown
		}
		t.buf = append(t.buf, b[:k]...)
		b = b[k:]
	}
	for len(b) > 0 { // full: overwrite the oldest bytes
		k := copy(t.buf[t.next:], b)
		b = b[k:]
		t.next = (t.next + k) % MaxBody
	}
}

// Bytes returns the bytes kept, oldest first. They are valid until the
// next Write.
func (t *tail) Bytes() []byte {
	if t.next > 0 { // rotate the ring's oldest byte to the front, in place
		slices.Reverse(t.buf[:t.next])
		slices.Reverse(t.buf[t.next:])
		slices.Reverse(t.buf)
		t.next = 0
	}
	return t.buf
}
