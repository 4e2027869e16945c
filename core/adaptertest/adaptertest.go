package adaptertest

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Settings is what a scenario asks of the adapter under test. The glue
// translates each field into the adapter's own options.
type Settings struct {
	// Limiter limits every request whose path Limiters does not name. It
	// is never nil.
	Limiter *slidelimit.Limiter
	// Limiters gives the requests to some paths (or gRPC methods) their
	// own limiter: the adapter's limiter choice. Nil for most scenarios.
	Limiters map[string]*slidelimit.Limiter
	// SkipPath, when set, is a path whose requests the adapter skips.
	SkipPath string
	// KeyHeader, when set, keys requests by the value of this header (or
	// gRPC metadata key), hashed as slidelimit.HeaderIdentity hashes it:
	// the adapter's KeyByHeader. When empty, requests are keyed by client
	// IP as ClientIP resolves it.
	KeyHeader string
	// ClientIP is the client-IP resolver of the key: its TrustedProxies and
	// Header, and its IPv6Prefix.
	ClientIP slidelimit.ClientIP
	// Headers selects the rate-limit header fields: the adapter's
	// WithHeaders or Headers setting.
	Headers slidelimit.Headers
	// CostHeader, when set, names the header that holds a request's cost
	// as a decimal integer; without it a request costs 1.
	CostHeader string
	// RefundFailed and RefundSuccessful turn on the adapter's refund by
	// status of failed (status 400 and above; a gRPC code other than OK)
	// and of successful requests.
	RefundFailed, RefundSuccessful bool
	// Hook must receive every error the adapter's error hook receives.
	Hook func(err error)
}

// LimiterFor returns the limiter s gives a request to path.
func (s Settings) LimiterFor(path string) *slidelimit.Limiter {
	if lim, ok := s.Limiters[path]; ok {
		return lim
	}
	return s.Limiter
}

// Request is one request a scenario sends.
type Request struct {
	// Peer is the address the request comes from.
	Peer netip.Addr
	// Path is the request's path, "/a" unless the scenario says otherwise;
	// a gRPC adapter's glue maps it to a method.
	Path string
	// Header holds the request's header fields (or gRPC metadata).
	Header http.Header
	// Status is the status the handler behind the adapter answers with
	// (a gRPC handler maps it to a code); 0 means 200.
	Status int
}

// Response is what came back.
type Response struct {
	// Status is the response's status code, or the gRPC code mapped to
	// HTTP's (see the package doc).
	Status int
	// Header holds the response's header fields, and a gRPC call's header
	// and trailer metadata, in canonical form (http.Header.Add).
	Header http.Header
	// Body is the response's body; nil for gRPC. An HTTP denial's must be
	// the application/problem+json document of httplimit.NewProblem.
	Body []byte
	// RetryAfter is when to retry by the protocol's own means: the
	// Retry-After field for HTTP, the RetryInfo detail for gRPC; zero if
	// the response has none.
	RetryAfter time.Duration
}

// Server sends one request to the adapter under test and returns its
// response. It must be safe for concurrent use.
type Server func(t testing.TB, r Request) Response

// Adapter builds the adapter under test with settings s, behind which a
// handler answers every request with its Request.Status, and returns a
// Server for it. It may use t for cleanup.
type Adapter func(t *testing.T, s Settings) Server

// Run runs every scenario of the suite against the adapter a builds, each
// as a subtest of t.
func Run(t *testing.T, a Adapter) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, a)
		})
	}
}
