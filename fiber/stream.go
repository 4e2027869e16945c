package fiberlimit

import (
	"io"
	"reflect"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/valyala/fasthttp"
)

// A body that Fiber streams (c.SendStream, c.Context().SetBodyStreamWriter)
// is read by fasthttp once the handlers have returned, as it is sent. Its
// end is the end of the request: fasthttp closes every io.Closer among
// the request's user values once the response is written (or has failed),
// before it reuses the context, and ended is one of them. Its bytes reach
// the settle function through teeStream, which takes the stream's place in
// the response: fasthttp has no way to set a stream without closing the
// one it holds, so the place is set directly (bodyStreamAt); should a
// fasthttp release move it, the stream is sent as it is and settled
// without its body, which TestBodyStreamFieldIsFound catches first.

// ended calls its function when fasthttp closes it, at the request's end.
type ended func()

// Close calls e.
func (e ended) Close() error {
	e()
	return nil
}

// teeStream passes a body stream on, its bytes written to p as they are
// read.
type teeStream struct {
	r io.Reader
	p *adapter.Pending[*fiber.Ctx]
}

// Read reads from the stream, and writes what it read to p.
func (s *teeStream) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	_, _ = s.p.Write(b[:n])
	return n, err
}

// Close closes the stream, as fasthttp would have.
func (s *teeStream) Close() error {
	if c, ok := s.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// bodyStream is where a fasthttp.Response holds its body stream, if found.
var bodyStream, bodyStreamFound = func() (uintptr, bool) {
	f, ok := reflect.TypeFor[fasthttp.Response]().FieldByName("bodyStream")
	return f.Offset, ok && f.Type == reflect.TypeFor[io.Reader]()
}()

// teeBodyStream makes resp's body stream write its bytes to p as it is
// sent, and reports whether it could.
func teeBodyStream(resp *fasthttp.Response, p *adapter.Pending[*fiber.Ctx]) bool {
	if !bodyStreamFound {
		return false
	}
	at := (*io.Reader)(unsafe.Add(unsafe.Pointer(resp), bodyStream))
	*at = &teeStream{r: *at, p: p}
	return true
}
