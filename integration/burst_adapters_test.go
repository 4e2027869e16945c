package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// requester makes one request as identity to a server and reports whether
// the server admitted it.
type requester func(ctx context.Context, identity string) (bool, error)

// burstAdapter serves a limiter through one adapter on a loopback
// listener, and returns how to make one request to it with a real client.
type burstAdapter struct {
	name  string
	serve func(t *testing.T, lim *slidelimit.Limiter) requester
}

// burstAdapters is every adapter, each keyed by an API key the client sends.
func burstAdapters() []burstAdapter {
	httpServer := func(start func(*testing.T, *slidelimit.Limiter) string) func(*testing.T, *slidelimit.Limiter) requester {
		return func(t *testing.T, lim *slidelimit.Limiter) requester {
			url := start(t, lim) + "/ping"
			// One connection per concurrent request, as 1,000 clients
			// would open.
			tr := &http.Transport{MaxIdleConnsPerHost: 1000}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr, Timeout: time.Minute}
			return func(ctx context.Context, identity string) (bool, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return false, err
				}
				req.Header.Set(apiKeyHeader, identity)
				resp, err := client.Do(req)
				if err != nil {
					return false, err
				}
				resp.Body.Close()
				ok, err := admitted(resp.StatusCode)
				if err != nil {
					return false, fmt.Errorf("GET %s: %w", url, err)
				}
				return ok, nil
			}
		}
	}
	return []burstAdapter{
		{"httplimit", httpServer(startNetHTTP)},
		{"ginlimit", httpServer(startGin)},
		{"fiberlimit", httpServer(startFiber)},
		{"echolimit", httpServer(startEcho)},
		{"grpclimit unary", func(t *testing.T, lim *slidelimit.Limiter) requester {
			conn := startGRPC(t, lim)
			return func(ctx context.Context, identity string) (bool, error) { return sayOnce(ctx, conn, identity) }
		}},
		{"grpclimit stream", func(t *testing.T, lim *slidelimit.Limiter) requester {
			conn := startGRPC(t, lim)
			return func(ctx context.Context, identity string) (bool, error) { return chatOnce(ctx, conn, identity) }
		}},
	}
}

// TestBurstThroughAdapters proves that a burst buys no extra quota: 1,000
// concurrent requests from one identity through each adapter, under a limit
// of 5 per minute and the default timeout and failure policy (fail-open),
// admit exactly 5, and not one decision falls back to the failure policy,
// while two busy loops keep the machine's cores occupied. 50 identities × 20
// concurrent requests admit exactly 5 each. It runs on standalone Redis and
// on Redis Cluster, against real servers on loopback and real clients.
func TestBurstThroughAdapters(t *testing.T) {
	long(t)
	const quota = 5
	limit := slidelimit.Per(quota, time.Minute)
	shapes := []struct {
		name       string
		identities int
		perID      int
	}{
		{"1 identity × 1000", 1, 1000},
		{"50 identities × 20", 50, 20},
	}
	busyLoops(t, 2, 5*time.Minute)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.client(t)
			for _, ad := range burstAdapters() {
				for _, sh := range shapes {
					t.Run(ad.name+"/"+sh.name, func(t *testing.T) {
						var fallbacks, failures atomic.Int64
						var errMu sync.Mutex
						errKinds := map[string]int{} // error text → count, to tell a cause from its consequences
						observe := slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
							if o.Result.Fallback {
								fallbacks.Add(1)
							}
							if o.Err != nil {
								failures.Add(1)
								errMu.Lock()
								errKinds[o.Err.Error()]++
								errMu.Unlock()
							}
						})
						// The defaults, as a user gets them: 100 ms timeout, fail-open.
						lim := newLimiter(t, rdb, redistest.Prefix(t), limit, observe)
						do := ad.serve(t, lim)

						admitted := make([]atomic.Int64, sh.identities)
						var reqErrs atomic.Int64
						var firstReqErr atomic.Value
						start := make(chan struct{})
						var wg sync.WaitGroup
						began := time.Now()
						for i := range sh.identities {
							identity := fmt.Sprintf("burst-%d", i)
							for range sh.perID {
								wg.Add(1)
								go func() {
									defer wg.Done()
									<-start
									ok, err := do(t.Context(), identity)
									switch {
									case err != nil:
										reqErrs.Add(1)
										firstReqErr.CompareAndSwap(nil, err)
									case ok:
										admitted[i].Add(1)
									}
								}()
							}
						}
						close(start)
						wg.Wait()
						took := time.Since(began)

						if n := reqErrs.Load(); n > 0 {
							t.Errorf("%d requests failed, first: %v", n, firstReqErr.Load())
						}
						total, wrong := int64(0), 0
						for i := range admitted {
							got := admitted[i].Load()
							total += got
							if got != quota {
								if wrong < 5 {
									t.Errorf("identity burst-%d: %d of %d concurrent requests admitted, want exactly %d", i, got, sh.perID, quota)
								}
								wrong++
							}
						}
						if wrong > 5 {
							t.Errorf("... and %d more identities admitted a number other than %d", wrong-5, quota)
						}
						if n := fallbacks.Load(); n > 0 {
							errMu.Lock()
							t.Errorf("%d decisions fell back to the failure policy (%d with an error: %v), want 0",
								n, failures.Load(), errKinds)
							errMu.Unlock()
						}
						t.Logf("%d requests in %v: %d admitted, %d fallback decisions", sh.identities*sh.perID,
							took.Round(time.Millisecond), total, fallbacks.Load())
					})
				}
			}
		})
	}
}

// busyLoops starts n bash processes that spin until the test ends or d
// passes, whichever is first, to occupy the machine's cores as a busy host
// would. They are killed when the test ends, and stop by themselves after d
// even if the test binary dies first.
func busyLoops(t *testing.T, n int, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	loop := fmt.Sprintf("while [ $SECONDS -lt %d ]; do :; done", int(d.Seconds()))
	for i := range n {
		cmd := exec.CommandContext(ctx, "bash", "-c", loop)
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("busy loop %d: %v", i, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(cancel)
}
