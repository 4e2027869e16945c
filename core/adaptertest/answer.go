package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The header fields by which HTTPRequest tells the handler behind the
// adapter how to answer (AnswerTo reads them), beside StatusHeader.
const (
	// UsageHeader holds Request.Usage.
	UsageHeader = "X-Adaptertest-Usage"
	// StreamHeader is "1" for a Request that asks for a stream.
	StreamHeader = "X-Adaptertest-Stream"
	// GateHeader names the Request's Gate.
	GateHeader = "X-Adaptertest-Gate"
)

// UsageKey is the trailer metadata key in which a gRPC handler reports an
// Answer's Usage, for the glue's settle function to read.
const UsageKey = "x-adaptertest-usage"

// Answer is how the handler behind the adapter answers a request, as its
// Request asked: AnswerTo reads it from the request's header fields, or
// from a gRPC call's metadata turned into an http.Header. Handler answers
// so; a glue whose framework needs a handler of its own answers the same
// way:
//
//	a := adaptertest.AnswerTo(header)
//	a.Wait(ctx) // before the body, unless Stream
//	… status a.Status, then each of a.Body()'s chunks, flushed when
//	a.Stream, with a.Wait(ctx) after the first
type Answer struct {
	// Status is the status to answer with (a gRPC handler maps it to a
	// code as the package doc says).
	Status int
	// Usage is the units the response reports it used, for the adapter's
	// settle function (Settings.Settle); 0 reports none.
	Usage int
	// Stream asks for the body as a stream: several chunks, each sent on
	// its own (flushed; gRPC: a server stream's messages), the usage in
	// the last.
	Stream bool

	gate *Gate
}

// AnswerTo returns the Answer a request with header h asks for.
func AnswerTo(h http.Header) Answer {
	a := Answer{Status: WantStatus(h), Stream: h.Get(StreamHeader) == "1"}
	a.Usage, _ = strconv.Atoi(h.Get(UsageHeader))
	if id := h.Get(GateHeader); id != "" {
		if g, ok := gates.Load(id); ok {
			a.gate = g.(*Gate)
		}
	}
	return a
}

// Wait marks the request as having reached its handler and, if the
// request carries a Gate, blocks until the gate opens or ctx ends. A
// handler calls it before it sends anything, or for a stream after its
// first chunk, so that the response is under way while the gate holds it.
func (a Answer) Wait(ctx context.Context) {
	if a.gate == nil {
		return
	}
	a.gate.enter()
	select {
	case <-a.gate.open:
	case <-ctx.Done():
	}
}

// Body returns the chunks of the response's body, as an OpenAI-compatible
// API sends them: one JSON document with its usage at the end, or, for a
// Stream, Server-Sent Events whose last data chunk carries the usage and
// whose end is "data: [DONE]". A usage of 0 leaves "usage" out, or null.
func (a Answer) Body() [][]byte {
	usage := "null"
	if a.Usage > 0 {
		usage = fmt.Sprintf(`{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}`, a.Usage-1, a.Usage)
	}
	if !a.Stream {
		if a.Usage == 0 {
			return [][]byte{[]byte(`{"id":"answer","choices":[]}`)}
		}
		return [][]byte{[]byte(`{"id":"answer","choices":[],"usage":` + usage + `}`)}
	}
	return [][]byte{
		[]byte("data: {\"id\":\"answer\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"),
		[]byte("data: {\"id\":\"answer\",\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\n\n"),
		[]byte("data: {\"id\":\"answer\",\"choices\":[],\"usage\":" + usage + "}\n\n"),
		[]byte("data: [DONE]\n\n"),
	}
}

// Serve answers a net/http request: it is Handler.
func (a Answer) Serve(w http.ResponseWriter, r *http.Request) {
	if a.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		a.Wait(r.Context())
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.Status)
	for i, chunk := range a.Body() {
		_, _ = w.Write(chunk)
		if a.Stream {
			_ = http.NewResponseController(w).Flush()
			if i == 0 {
				a.Wait(r.Context())
			}
		}
	}
}

// Gate holds the handler of the requests that carry it (Request.Gate) in
// Answer.Wait until Open, so that a scenario can act while a request is
// in flight. It is safe for concurrent use.
type Gate struct {
	id      string
	entered chan struct{}
	open    chan struct{}
	in      sync.Once
	out     sync.Once
}

var (
	gates  sync.Map // id → *Gate
	gateID atomic.Int64
)

// NewGate returns a closed gate, opened at the latest when t ends.
func NewGate(t testing.TB) *Gate {
	g := &Gate{id: strconv.FormatInt(gateID.Add(1), 10), entered: make(chan struct{}), open: make(chan struct{})}
	gates.Store(g.id, g)
	t.Cleanup(func() {
		g.Open()
		gates.Delete(g.id)
	})
	return g
}

func (g *Gate) enter() { g.in.Do(func() { close(g.entered) }) }

// Entered is closed once a request carrying g has reached Wait.
func (g *Gate) Entered() <-chan struct{} { return g.entered }

// Open lets the requests g holds go on, and every later one pass.
func (g *Gate) Open() { g.out.Do(func() { close(g.open) }) }
