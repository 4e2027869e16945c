// Command proxy is a gateway in front of an OpenAI-compatible or Anthropic
// API that limits each API key, its team and its organisation, across
// every replica on one Redis, as the API limits its own clients: requests
// and tokens per window, requests in flight, a daily or monthly token
// budget, and shadow limits being rolled out (package llmlimit). Keys,
// teams and organisations come from a JSON file (see llmproxy.json); a key
// is the bearer token of Authorization, or Anthropic's x-api-key.
//
// Environment: ADDR (":8080"), UPSTREAM ("http://127.0.0.1:9090", the
// API's base URL without /v1), CONFIG ("llmproxy.json"), REDIS_ADDRS
// ("127.0.0.1:6379"; host:port,host:port,... for Redis Cluster). It stops
// gracefully on SIGINT or SIGTERM.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/llm"
)

// config is the file CONFIG names. Window is that of requests and tokens
// (default "1m"); Lease how long a dead replica's places in flight stay
// taken ("1m"); RedisTimeout how long to wait for Redis before a request
// passes unlimited ("100ms"). A key of "*" stands for any key not listed,
// each with a count of its own. A key is "in" a team, a team "in" an org.
type config struct {
	Window, Lease, RedisTimeout duration
	Orgs, Teams, Keys           map[string]level
}

type level struct {
	In             string
	Limits, Shadow llmlimit.Limits
}

type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) (err error) {
	d.Duration, err = time.ParseDuration(string(b))
	return err
}

func readConfig(path string) (*config, error) {
	c := &config{Window: duration{time.Minute}, Lease: duration{time.Minute}, RedisTimeout: duration{slidelimit.DefaultTimeout}}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, c)
	}
	for _, g := range [][2]map[string]level{{c.Keys, c.Teams}, {c.Teams, c.Orgs}} { // keys in teams, teams in orgs
		for name, l := range g[0] {
			if _, ok := g[1][l.In]; l.In != "" && !ok {
				err = errors.Join(err, fmt.Errorf("%q is in %q, which is not listed", name, l.In))
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// caller returns the levels of a request's key: its org's, its team's and
// its own.
func (c *config) caller(r *http.Request, _ llmlimit.Request) (llmlimit.Caller, error) {
	key := cmp.Or(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("X-Api-Key"))
	k, ok := c.Keys[key]
	if star, listed := c.Keys["*"]; !ok && listed {
		k, ok = star, true
	}
	if key == "" || !ok {
		return llmlimit.Caller{}, llmlimit.ErrUnknownCaller
	}
	levels := []llmlimit.Level{{Name: "key", ID: key, Limits: k.Limits, Shadow: k.Shadow}}
	for name, in, of := "team", k.In, c.Teams; in != ""; name, of = "org", c.Orgs {
		l := of[in]
		levels = append([]llmlimit.Level{{Name: name, ID: in, Limits: l.Limits, Shadow: l.Shadow}}, levels...)
		in = l.In // an org's is ""
	}
	return llmlimit.Caller{Levels: levels}, nil
}

// newHandler proxies every request to upstream, those to the API through lim.
func newHandler(lim *slidelimit.Limiter, c *config, upstream *url.URL) http.Handler {
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(upstream); r.SetXForwarded() }}
	mux := http.NewServeMux()
	mux.Handle("/", llmlimit.New(lim, c.caller, llmlimit.WithWindow(c.Window.Duration), llmlimit.WithLease(c.Lease.Duration))(proxy))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

func run(ctx context.Context) error {
	c, err := readConfig(cmp.Or(os.Getenv("CONFIG"), "llmproxy.json"))
	if err != nil {
		return err
	}
	upstream, err := url.Parse(cmp.Or(os.Getenv("UPSTREAM"), "http://127.0.0.1:9090"))
	if err != nil || upstream.Host == "" {
		return fmt.Errorf("UPSTREAM: %q is not a URL", os.Getenv("UPSTREAM"))
	}
	// One address is a standalone Redis; several are Redis Cluster's. ContextTimeoutEnabled:
	// a dead Redis costs a request at most RedisTimeout.
	addrs := strings.Split(cmp.Or(os.Getenv("REDIS_ADDRS"), "127.0.0.1:6379"), ",")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	defer rdb.Close()
	// The limiter's own limit takes no part: each request is held to its key's tree.
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithTimeout(c.RedisTimeout.Duration))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), ":8080"))
	if err != nil {
		return err
	}
	log.Printf("listening on %s and proxying to %s for %d keys, %d teams, %d orgs", ln.Addr(), upstream, len(c.Keys), len(c.Teams), len(c.Orgs))
	srv := &http.Server{Handler: newHandler(lim, c, upstream), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		// Requests in flight may take their lease; then the lease frees their places.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Lease.Duration)
		defer cancel()
		done <- srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-done
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}
