package adaptertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
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
	// PlanHeader, when set, names the header (or gRPC metadata key) that
	// holds a request's plan: the adapter holds the request to the limits
	// Plan returns for its value, instead of the limiter's own (its
	// per-request limits setting).
	PlanHeader string
	// Tree, when set, holds each request to a tenant's tree: the adapter's
	// tree setting gives a request the tenant and levels Tree returns for
	// the value of its TreeHeader field (or gRPC metadata key), in place of
	// its key and limits. Its error fails the request.
	Tree func(value string) (tenant string, levels []slidelimit.Level, err error)
	// RefundFailed and RefundSuccessful turn on the adapter's refund by
	// status of failed (status 400 and above; a gRPC code other than OK)
	// and of successful requests.
	RefundFailed, RefundSuccessful bool
	// Settle turns on the adapter's settle function: each admitted request
	// is settled to the units its response reports (Answer.Usage), which
	// an HTTP adapter reads with httplimit.TotalTokens from the body, and
	// a gRPC adapter from the UsageKey trailer.
	Settle bool
	// Hook must receive every error the adapter's error hook receives.
	Hook func(err error)
}

// Plan returns the limits of a request whose PlanHeader holds value: a
// quota per minute as a decimal integer, or none (the limiter's own) for an
// empty value. A value that is no such quota gives a zero Limit, which the
// limiter refuses (slidelimit.ErrInvalidLimit).
func Plan(value string) []slidelimit.Limit {
	if value == "" {
		return nil
	}
	quota, err := strconv.Atoi(value)
	if err != nil {
		return []slidelimit.Limit{{}}
	}
	return []slidelimit.Limit{slidelimit.PerMinute(quota)}
}

// TreeHeader is the header field (or gRPC metadata key) whose value a
// request's tree is read from, by Settings.Tree.
const TreeHeader = "X-Adaptertest-Tree"

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
	// Usage is the units the handler's response reports it used
	// (Answer.Usage); 0 reports none.
	Usage int
	// Stream asks the handler for a streamed response (Answer.Stream): an
	// HTTP glue sends the request as it is; a gRPC glue calls a server
	// stream method of the same name.
	Stream bool
	// Gate, when set, holds the handler until it opens (Answer.Wait).
	Gate *Gate
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
// every request as AnswerTo its header says.
var Handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	AnswerTo(r.Header).Serve(w, r)
})

// HTTPRequest returns r as an *http.Request: GET r.Path from r.Peer (port
// 40000) with r.Header, and r.Status, r.Usage, r.Stream and r.Gate in the
// fields AnswerTo reads (StatusHeader, UsageHeader, StreamHeader,
// GateHeader).
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
	if r.Usage != 0 {
		req.Header.Set(UsageHeader, strconv.Itoa(r.Usage))
	}
	if r.Stream {
		req.Header.Set(StreamHeader, "1")
	}
	if r.Gate != nil {
		req.Header.Set(GateHeader, r.Gate.id)
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

// NewLimiter returns a limiter of limit on rdb, for a test of an adapter:
// under a key prefix of t's own (redistest.Prefix, within the 64 bytes a
// prefix may have), with a timeout long enough for a loaded machine, so
// that no decision falls back to the failure policy, and opts after
// those.
func NewLimiter(t testing.TB, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(redistest.Prefix(t)), slidelimit.WithTimeout(10 * time.Second)}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v): %v", limit, err)
	}
	return lim
}

// Send sends r to srv n times, one after the other, and returns the
// statuses.
func Send(t testing.TB, srv Server, n int, r Request) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = srv(t, r).Status
	}
	return out
}

// Statuses returns n times status followed by more, the statuses Send
// should return: Statuses(5, 200, 429) for five admissions and a denial.
func Statuses(n, status int, more ...int) []int {
	out := make([]int, 0, n+len(more))
	for range n {
		out = append(out, status)
	}
	return append(out, more...)
}

// ErrorLog records the errors an adapter's error hook receives; its Hook
// method is the hook. It is safe for concurrent use.
type ErrorLog struct {
	mu   sync.Mutex
	errs []error
}

// Hook records err.
func (l *ErrorLog) Hook(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// Take returns the errors recorded since the last Take.
func (l *ErrorLog) Take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	return errs
}

// Observed records the identities a limiter is asked about; its Observe
// method is a slidelimit.Observer (slidelimit.WithObserver). It is safe
// for concurrent use.
type Observed struct {
	mu  sync.Mutex
	ids []string
}

// Observe records o's identity.
func (o *Observed) Observe(_ context.Context, ob slidelimit.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, ob.Identity)
}

// Identities returns the identities observed, in order.
func (o *Observed) Identities() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ids...)
}

// serveAdmitted serves GET / from 192.0.2.1 through h n times and fails
// unless each is answered 200.
func serveAdmitted(tb testing.TB, h http.Handler, n int) {
	req := httptest.NewRequestWithContext(tb.Context(), http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:41000"
	for range n {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			tb.Fatalf("GET / = %d, want 200", rec.Code)
		}
	}
}

// MaxAddedAllocs is the most allocations an adapter may add to an admitted
// request, the decision's round trip through go-redis v9.5.5 included: 39
// measured through httplimit on a client of go-redis's defaults (the call
// and its round trip about 20, go-redis's command and reply about 12, the
// decision, its keys and arguments the rest).
const MaxAddedAllocs = 42

// Allocations fails t if limited, an HTTP adapter admitting every request
// around a handler, takes more than MaxAddedAllocs allocations per request
// beyond base, the same handler bare (or behind a middleware that does
// nothing): the budget of every adapter of this project, Redis's round
// trip included. Both serve GET / from
// 192.0.2.1 with 200. Skip it under the race detector, whose sync.Pool
// drops items at random.
func Allocations(t *testing.T, base, limited http.Handler) {
	t.Helper()
	perRequest := func(h http.Handler) float64 { return testing.AllocsPerRun(200, func() { serveAdmitted(t, h, 1) }) }
	b, l := perRequest(base), perRequest(limited)
	t.Logf("allocations per admitted request: %.1f without the limiter, %.1f behind it", b, l)
	if l-b > MaxAddedAllocs+0.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most %d", l-b, MaxAddedAllocs)
	}
}

// Benchmark serves GET / from 192.0.2.1 through h b.N times, reporting
// allocations; h must answer 200.
func Benchmark(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	serveAdmitted(b, h, b.N)
}

// ObserveSequence makes a known sequence of decisions, for a test of an
// observer such as a metrics adapter: on a Redis server of its own, a
// limiter of 5 per 10 s observed by observe admits five requests and
// denies one of one client; then, with the server stopped, it admits one
// request of another client as a fail-open fallback (another client, as
// the first one's denial would be answered by the deny cache). The
// observer must thus count, for the limit "5/10s", 5 "allowed", 1
// "denied" and 1 "fallback_allowed" decisions: 7 in all.
func ObserveSequence(t *testing.T, observe slidelimit.Observer) {
	t.Helper()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := NewLimiter(t, rdb, slidelimit.Per(5, 10*time.Second),
		slidelimit.WithTimeout(time.Second), slidelimit.WithObserver(observe))

	ctx := t.Context()
	for i := range 6 {
		if res, err := lim.Allow(ctx, "client-192.0.2.1"); err != nil || res.Allowed != (i < 5) {
			t.Fatalf("Allow #%d = %+v, %v, want Allowed %v", i+1, res, err, i < 5)
		}
	}
	srv.Stop()
	if res, err := lim.Allow(ctx, "client-192.0.2.2"); err == nil || !res.Fallback || !res.Allowed {
		t.Fatalf("Allow with Redis stopped = %+v, %v, want a fail-open fallback", res, err)
	}
}

// BenchmarkObserver measures what observe adds to each decision: it
// observes an admitted request b.N times, from parallel goroutines, and
// reports the allocations.
func BenchmarkObserver(b *testing.B, observe slidelimit.Observer) {
	o := slidelimit.Observation{Identity: "user:42", Cost: 1, Latency: 300 * time.Microsecond,
		Result: slidelimit.Result{Allowed: true, Limit: slidelimit.PerMinute(100), Remaining: 7}}
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			observe(ctx, o)
		}
	})
}

// DenyHandler checks an HTTP adapter's own deny handler, which Run leaves
// at its default: build must return the adapter, limiting every request
// by lim (1 per 10 s) and answering a denial with a deny handler that
// passes to denied the Result it is given and the response's Retry-After
// field as it is when the handler runs, and answers 503. Of two requests,
// the second must reach that handler with a denial by 1/10s and
// Retry-After already set, and its response must carry the handler's 503,
// Retry-After and RateLimit. DenyHandler returns that response, for the
// caller to check what its handler wrote.
func DenyHandler(t *testing.T, build func(lim *slidelimit.Limiter, denied func(res slidelimit.Result, retryAfter string)) Server) Response {
	t.Helper()
	type call struct {
		res        slidelimit.Result
		retryAfter string
	}
	var calls []call
	srv := build(NewLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second)),
		func(res slidelimit.Result, retryAfter string) { calls = append(calls, call{res, retryAfter}) })
	if r := get(t, srv, "/a"); r.Status != http.StatusOK {
		t.Errorf("first request = %d, want 200", r.Status)
	}
	r := get(t, srv, "/a")
	if r.Status != http.StatusServiceUnavailable {
		t.Errorf("second request = %d, want the deny handler's 503", r.Status)
	}
	if len(calls) != 1 || calls[0].res.Allowed || calls[0].res.Limit.String() != "1/10s" || calls[0].retryAfter == "" {
		t.Errorf("deny handler given %+v, want one denial by 1/10s with Retry-After already set", calls)
	}
	if r.Header.Get(slidelimit.FieldRetryAfter) == "" || r.Header.Get(slidelimit.FieldRateLimit) == "" {
		t.Errorf("denied request: Retry-After %q, RateLimit %q, want both",
			r.Header.Get(slidelimit.FieldRetryAfter), r.Header.Get(slidelimit.FieldRateLimit))
	}
	return r
}
