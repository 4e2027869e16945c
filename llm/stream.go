package llmlimit

import (
	"bytes"
	"net/http"
	"strings"
)

// Bounds on what the middleware holds of an answer: a line of a stream
// longer than maxLine is passed on unread, and an event longer than
// maxEvent is passed on without being held (and so never stripped).
const (
	maxLine  = 1 << 20
	maxEvent = 1 << 20
)

// answer is the response writer the next handler writes to. It sets the
// rate-limit header fields when the answer starts, over any the handler
// set (an upstream's own, through a reverse proxy), and reads the usage of
// a streamed answer as it passes, event by event; with strip set it holds
// each event until it has ended and drops the chunk that carries only
// usage, for a client that did not ask for it.
type answer struct {
	http.ResponseWriter
	fields func(h http.Header) // writes the rate-limit header fields
	strip  bool

	started bool
	stream  bool   // a text/event-stream answer
	m       meter  // the usage read of a stream
	line    []byte // the line being read, up to maxLine
	long    bool   // the line being read is longer than maxLine
	held    []byte // strip: the event being held, up to maxEvent
	passing bool   // strip: the event being read was too long to hold
	drop    bool   // strip: the event being held carries only usage
}

// start sets the header fields once, before the first byte of the answer.
func (a *answer) start() {
	if a.started {
		return
	}
	a.started = true
	h := a.Header()
	if a.fields != nil {
		a.fields(h)
	}
	a.stream = strings.HasPrefix(strings.TrimSpace(strings.ToLower(h.Get("Content-Type"))), "text/event-stream")
	if a.stream && a.strip {
		h.Del("Content-Length") // the answer may lose a chunk
	}
}

// WriteHeader sets the rate-limit header fields and sends the header.
func (a *answer) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		a.start()
	}
	a.ResponseWriter.WriteHeader(code)
}

// Write passes b on, reading the usage of a stream on the way.
func (a *answer) Write(b []byte) (int, error) {
	a.start()
	if !a.stream {
		return a.ResponseWriter.Write(b)
	}
	n := len(b)
	for len(b) > 0 {
		chunk := b
		i := bytes.IndexByte(b, '\n')
		if i >= 0 {
			chunk = b[:i+1]
		}
		b = b[len(chunk):]
		if err := a.feed(chunk, i >= 0); err != nil {
			return n - len(b) - len(chunk), err
		}
	}
	return n, nil
}

// feed takes one piece of a line, its end if ended.
func (a *answer) feed(chunk []byte, ended bool) error {
	if !a.long {
		if len(a.line)+len(chunk) > maxLine {
			a.long, a.line = true, a.line[:0]
		} else {
			a.line = append(a.line, chunk...)
		}
	}
	usageOnly := false
	blank := false
	if ended {
		if !a.long {
			usageOnly = a.readLine(a.line)
			blank = len(bytes.TrimRight(a.line, "\r\n")) == 0
		}
		a.line, a.long = a.line[:0], false
	}
	if !a.strip || a.passing {
		if blank {
			a.passing = false
		}
		_, err := a.ResponseWriter.Write(chunk)
		return err
	}
	a.held = append(a.held, chunk...)
	a.drop = a.drop || usageOnly
	switch {
	case blank:
		held, drop := a.held, a.drop
		a.held, a.drop = a.held[:0], false
		if !drop {
			_, err := a.ResponseWriter.Write(held)
			return err
		}
	case len(a.held) > maxEvent:
		a.passing, a.drop = true, false
		held := a.held
		a.held = a.held[:0]
		_, err := a.ResponseWriter.Write(held)
		return err
	}
	return nil
}

// readLine reads the usage of one line of a stream, and reports whether
// it is the data of a chunk that carries only usage.
func (a *answer) readLine(line []byte) bool {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		return false
	}
	return a.m.read(bytes.TrimPrefix(data, []byte(" ")))
}

// finish sends an event still held when the handler returns, one the
// stream never ended with a blank line.
func (a *answer) finish() {
	if len(a.held) > 0 && !a.drop {
		_, _ = a.ResponseWriter.Write(a.held)
	}
	a.held = nil
}

// Flush sends what has been written, as http.Flusher; an event still
// held stays held until it ends.
func (a *answer) Flush() {
	a.start()
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (a *answer) Unwrap() http.ResponseWriter { return a.ResponseWriter }
