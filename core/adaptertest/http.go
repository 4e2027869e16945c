package adaptertest

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// StatusHeader is the header field by which HTTPRequest tells the handler
// behind the adapter which status to answer with; WantStatus reads it.
const StatusHeader = "X-Adaptertest-Status"

// WantStatus returns the status a request with header h must be answered
// with: the value of StatusHeader, 200 without it.
func WantStatus(h http.Header) int {
	if s, err := strconv.Atoi(h.Get(StatusHeader)); err == nil && s > 0 {
		return s
	}
	return http.StatusOK
}

// Handler is the net/http handler to put behind the adapter: it answers
// every request with WantStatus of its header.
var Handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(WantStatus(r.Header))
})

// HTTPRequest returns r as an *http.Request: GET r.Path from r.Peer (port
// 40000) with r.Header, and r.Status in StatusHeader.
func (r Request) HTTPRequest(t testing.TB) *http.Request {
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, r.Path, nil)
	req.RemoteAddr = netip.AddrPortFrom(r.Peer, 40000).String()
	for name, values := range r.Header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	if r.Status != 0 {
		req.Header.Set(StatusHeader, strconv.Itoa(r.Status))
	}
	return req
}

// HTTPResponse returns the Response of an HTTP status, header and body.
func HTTPResponse(status int, h http.Header, body []byte) Response {
	res := Response{Status: status, Header: h, Body: body}
	if res.Body == nil {
		res.Body = []byte{}
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
		res.RetryAfter = time.Duration(s) * time.Second
	}
	return res
}

// HTTPServer returns the Server of a net/http handler, such as the
// adapter under test wrapped around Handler, served in process.
func HTTPServer(h http.Handler) Server {
	return func(t testing.TB, r Request) Response {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r.HTTPRequest(t))
		return HTTPResponse(rec.Code, rec.Header(), rec.Body.Bytes())
	}
}
