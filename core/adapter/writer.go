package adapter

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// ResponseWriter passes a response on to the http.ResponseWriter it wraps
// and records what the end of a request needs of it (Pending): its status
// code, and its body's bytes, which it writes to Body too when Body is
// set. It keeps the wrapped writer's Flush and Hijack, and the rest
// reachable through Unwrap and http.ResponseController, so that a
// streamed response (Server-Sent Events) and a protocol upgrade work
// through it. net/http middleware (httplimit) and an adapter whose
// framework's response wraps an http.ResponseWriter (echolimit) use it.
type ResponseWriter struct {
	http.ResponseWriter
	// Body, when set, receives every byte of the body written, such as a
	// Pending that Captures.
	Body io.Writer

	code int
}

// WriteHeader sends the header with code, and records it.
func (w *ResponseWriter) WriteHeader(code int) {
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b to the body, and to Body.
func (w *ResponseWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if w.Body != nil {
		_, _ = w.Body.Write(b[:n])
	}
	return n, err
}

// Status returns the status code sent, 200 if the handler sent none.
func (w *ResponseWriter) Status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Flush sends buffered data to the client, as http.Flusher.
func (w *ResponseWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection, as http.Hijacker.
func (w *ResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *ResponseWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}
