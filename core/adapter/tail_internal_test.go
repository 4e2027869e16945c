package adapter

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestTailKeepsTheLastBytes writes bodies in chunks of random sizes, some
// larger than MaxBody, and compares what the tail keeps with the last
// MaxBody bytes of the whole body.
func TestTailKeepsTheLastBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 100, MaxBody - 1, MaxBody, MaxBody + 1, 3*MaxBody + 17} {
		for _, largest := range []int{1, 7, 4096, 2 * MaxBody} {
			var tl tail
			var all []byte
			chunks := 0
			for len(all) < size {
				chunk := make([]byte, min(1+rng.IntN(largest), size-len(all)))
				for i := range chunk { // no period a rotation could hide behind
					k := len(all) + i
					chunk[i] = byte(k ^ k>>8 ^ k>>16)
				}
				all = append(all, chunk...)
				tl.Write(chunk)
				if chunks++; chunks&(chunks-1) == 0 {
					_ = tl.Bytes() // reading midway, at chunks 1, 2, 4, 8…, leaves the tail intact
				}
			}
			want := all[max(0, len(all)-MaxBody):]
			if got := tl.Bytes(); !bytes.Equal(got, want) || tl.size != int64(size) {
				t.Errorf("tail of %d bytes in chunks up to %d = %d bytes, size %d; want the last %d, size %d",
					size, largest, len(got), tl.size, len(want), size)
			}
			if cap(tl.buf) > MaxBody {
				t.Errorf("tail of %d bytes holds a buffer of %d, want at most %d", size, cap(tl.buf), MaxBody)
			}
		}
	}
}
