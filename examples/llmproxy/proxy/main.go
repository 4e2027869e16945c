// Command proxy is a reverse proxy in front of an OpenAI-compatible API that
// limits each API key, across every replica of the proxy on one Redis, to
// requests per window, tokens per window and requests in flight:
//
//   - requests: each request counts one (slidelimit.Limit.ForRequests);
//   - tokens: each request reserves its prompt's estimate plus its
//     max_tokens when it is admitted, and is settled to the usage the API
//     reports (httplimit.WithSettle, httplimit.TotalTokens), so that the
//     tokens it did not use are free again at once;
//   - in flight: each request holds a place from its admission until its
//     answer ends (slidelimit.InFlight). A replica that dies holding places
//     frees them after LEASE; the requests it never settled keep their
//     reservations.
//
// It proxies POST /v1/chat/completions, JSON and streamed. The key is the
// bearer token of the Authorization header, which is passed on. The
// prompt's estimate is 3 tokens for each message, 3 to prime the reply and
// one for every 4 bytes of the messages' text, as English averages; the API
// counts with its own tokenizer, so a request may use a few tokens more
// than it reserved, which its settlement records. A streamed request is
// made to ask for its usage ("stream_options":{"include_usage":true}), so
// that it can be settled too. A request the API refuses (4xx) is given
// back whole; one whose usage never comes keeps its reservation.
//
// Environment:
//
//	ADDR                 listen address (default ":8080")
//	UPSTREAM             the API's base URL (default "http://127.0.0.1:9090")
//	RPM                  requests per WINDOW per API key (default 60)
//	TPM                  tokens per WINDOW per API key (default 100000)
//	INFLIGHT             requests in flight per API key (default 4)
//	WINDOW               the window of RPM and TPM (default "1m")
//	LEASE                the longest a request may take: it is cut off
//	                     then, and the places in flight of a replica that
//	                     dies are free after it (default "2m")
//	DEFAULT_MAX_TOKENS   the reservation of a request without max_tokens
//	                     (default 4096)
//	API_KEYS             the keys to accept, comma-separated; unset, any
//	                     key, which leaves checking keys to the API and
//	                     gives every invented key a quota of its own
//	REDIS_TIMEOUT        how long to wait for Redis before the request
//	                     passes unlimited (default "100ms")
//	REDIS_URL            Redis to use (default "redis://127.0.0.1:6379/0")
//	REDIS_CLUSTER_ADDRS  host:port,host:port,... selects Redis Cluster instead
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// settings are the proxy's environment, parsed.
type settings struct {
	upstream         *url.URL
	rpm, tpm         slidelimit.Limit
	inFlight         slidelimit.Limit
	defaultMaxTokens int
	keys             map[string]bool // nil: any
	redisTimeout     time.Duration
}

func readSettings() (settings, error) {
	var s settings
	var err error
	if s.upstream, err = url.Parse(envOr("UPSTREAM", "http://127.0.0.1:9090")); err != nil || s.upstream.Host == "" {
		return s, fmt.Errorf("UPSTREAM: %q is not a URL", os.Getenv("UPSTREAM"))
	}
	window, err := time.ParseDuration(envOr("WINDOW", "1m"))
	if err != nil {
		return s, fmt.Errorf("WINDOW: %w", err)
	}
	lease, err := time.ParseDuration(envOr("LEASE", "2m"))
	if err != nil {
		return s, fmt.Errorf("LEASE: %w", err)
	}
	if s.redisTimeout, err = time.ParseDuration(envOr("REDIS_TIMEOUT", slidelimit.DefaultTimeout.String())); err != nil {
		return s, fmt.Errorf("REDIS_TIMEOUT: %w", err)
	}
	var rpm, tpm, inFlight int
	for _, v := range []struct {
		to   *int
		name string
		def  int
	}{{&rpm, "RPM", 60}, {&tpm, "TPM", 100000}, {&inFlight, "INFLIGHT", 4}, {&s.defaultMaxTokens, "DEFAULT_MAX_TOKENS", 4096}} {
		if *v.to, err = strconv.Atoi(envOr(v.name, strconv.Itoa(v.def))); err != nil || *v.to < 1 {
			return s, fmt.Errorf("%s: %q is not a positive number", v.name, os.Getenv(v.name))
		}
	}
	s.rpm = slidelimit.Per(rpm, window).ForRequests().Named("rpm")
	s.tpm = tokenLimit(tpm, window)
	s.inFlight = slidelimit.InFlight(inFlight, lease).Named("inflight")
	if keys := os.Getenv("API_KEYS"); keys != "" {
		s.keys = make(map[string]bool)
		for _, k := range strings.Split(keys, ",") {
			s.keys[strings.TrimSpace(k)] = true
		}
	}
	return s, nil
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context) error {
	s, err := readSettings()
	if err != nil {
		return err
	}
	rdb, err := newRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		log.Printf("redis does not answer yet (requests pass unlimited until it does): %v", err)
	}
	cancel()
	lim, err := slidelimit.New(rdb, s.tpm, slidelimit.WithLimits(s.rpm, s.inFlight), slidelimit.WithTimeout(s.redisTimeout))
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", envOr("ADDR", ":8080"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(lim, s), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("listening on %s and proxying to %s; per API key %d requests and %d tokens per %v, %d in flight (lease %v)",
		ln.Addr(), s.upstream, s.rpm.Quota, s.tpm.Quota, s.tpm.Window, s.inFlight.Quota, s.inFlight.Window)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	// Requests in flight may take up to their lease; a proxy stopped
	// sooner leaves their places to the lease.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.inFlight.Window)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler proxies POST /v1/chat/completions to s.upstream, through
// lim's limits per API key, and answers GET /healthz.
func newHandler(lim *slidelimit.Limiter, s settings) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(s.upstream)
			r.SetXForwarded()
		},
		// Many requests to one host at once: keep their connections.
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
	}
	limit := httplimit.New(lim,
		httplimit.WithKey(func(r *http.Request) (string, error) {
			return slidelimit.HeaderIdentity("authorization", apiKey(r)), nil
		}),
		httplimit.WithCost(func(r *http.Request) int { return r.Context().Value(estimateKey{}).(int) }),
		httplimit.WithSettle(httplimit.TotalTokens),
		// A request the API refuses used no tokens: give it back whole.
		httplimit.WithRefundFailed(),
		httplimit.WithFailedStatus(func(status int) bool { return status >= 400 && status < 500 }),
	)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", s.estimate(limit(within(s.inFlight.Window, proxy))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// apiKey returns the bearer token of r's Authorization header, "" if none.
func apiKey(r *http.Request) string {
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(key)
}

// estimateKey is the context key of a request's estimated tokens.
type estimateKey struct{}

// maxBody bounds the request bodies the proxy reads.
const maxBody = 8 << 20

// chatRequest is what the proxy reads of a chat completion request.
type chatRequest struct {
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Stream              bool `json:"stream"`
}

// estimate reads a request's body, answers what cannot be limited (no or
// an unknown API key: 401; a body that is not a chat completion request,
// or asks for more tokens than TPM ever admits: 400), and passes the
// others on to next with their body restored and their estimated tokens in
// their context.
func (s settings) estimate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := apiKey(r); key == "" || s.keys != nil && !s.keys[key] {
			writeError(w, http.StatusUnauthorized, "invalid API key: send Authorization: Bearer <key>")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		var req chatRequest
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil || len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "the body is not a chat completion request with messages")
			return
		}
		maxTokens := s.defaultMaxTokens
		if req.MaxCompletionTokens != nil {
			maxTokens = *req.MaxCompletionTokens
		} else if req.MaxTokens != nil {
			maxTokens = *req.MaxTokens
		}
		tokens := 3 + maxTokens
		for _, m := range req.Messages {
			tokens += 3 + (len(text(m.Content))+3)/4
		}
		if tokens < 1 || tokens > s.tpm.Quota {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("the request may use %d tokens, and at most %d are allowed per %v", tokens, s.tpm.Quota, s.tpm.Window))
			return
		}
		if req.Stream {
			if body, err = withUsage(body); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), estimateKey{}, tokens)))
	})
}

// text returns the text of a message's content: a string, or a list of
// parts whose text parts count.
func text(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &parts)
	for _, p := range parts {
		s += p.Text + " "
	}
	return s
}

// withUsage sets "stream_options":{"include_usage":true} in a streamed
// request's body, keeping every other field as it was.
func withUsage(body []byte) ([]byte, error) {
	var req, opts map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("stream_options: %w", err)
		}
	}
	if opts == nil {
		opts = make(map[string]json.RawMessage)
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	req["stream_options"] = raw
	return json.Marshal(req)
}

// within cuts a request off after d: its place in flight ends then.
func within(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// writeError answers as an OpenAI-compatible API does.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": "invalid_request_error"}})
}

// newRedis returns a cluster client if REDIS_CLUSTER_ADDRS is set, and a
// client of REDIS_URL otherwise.
//
// ContextTimeoutEnabled lets go-redis itself give up at the limiter's
// timeout, the fastest way for a dead Redis to cost at most that timeout.
func newRedis() (redis.UniversalClient, error) {
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true}), nil
	}
	opt, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// tokenLimit is the limit of tpm tokens per window. It is counted in
// steps of window/1000 whatever its quota, for a request reserves
// hundreds or thousands of tokens at once, more than one decision adds to
// an exact log (slidelimit.MaxExactCost); a stepped limit takes a request
// of any cost in one count, and never admits more than its quota in any
// window.
func tokenLimit(tpm int, window time.Duration) slidelimit.Limit {
	return slidelimit.Per(tpm, window).Stepped(max(window/1000, time.Millisecond)).Named("tpm")
}
