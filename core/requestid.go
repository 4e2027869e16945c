package slidelimit

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
)

// idsPerBatch is how many request ids one allocation holds.
const idsPerBatch = 64

// idBatches hands out 8-byte request ids cut from strings of random bytes,
// one allocation per idsPerBatch ids rather than one per id. An id keeps
// its batch, 512 bytes, alive while anything holds it: an admitted
// Result, or a command in flight. It is safe for concurrent use.
type idBatches struct {
	pool sync.Pool // of *idBatch
}

// idBatch is the part of one batch not handed out yet.
type idBatch struct {
	rest string
}

var requestIDs idBatches

// next returns 8 random bytes.
func (b *idBatches) next() string {
	batch, _ := b.pool.Get().(*idBatch)
	if batch == nil {
		batch = new(idBatch)
	}
	if len(batch.rest) < 8 {
		var buf [8 * idsPerBatch]byte
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], rand.Uint64())
		}
		batch.rest = string(buf[:])
	}
	id := batch.rest[:8]
	batch.rest = batch.rest[8:]
	b.pool.Put(batch)
	return id
}
