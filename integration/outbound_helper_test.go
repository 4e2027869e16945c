package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// The outbound helper protocol, like TestHelperProcess's: the parent
// re-executes its test binary with -test.run=^TestOutboundHelperProcess$
// and the JSON of an outboundConfig in envOutbound; the helper builds a
// limiter and an httplimit.Transport, warms up, prints lineReady, waits for
// the start line, runs its workers against the partner until the run ends
// and prints lineResult and the JSON of an outboundReport.
const envOutbound = "SLIDELIMIT_OUTBOUND_HELPER"

// outboundConfig tells an outbound helper process what to do.
type outboundConfig struct {
	Target   target        `json:"target"`
	Prefix   string        `json:"prefix"`
	URL      string        `json:"url"` // the partner
	Limit    limitSpec     `json:"limit"`
	Workers  int           `json:"workers"`
	Run      time.Duration `json:"run"`
	Policy   string        `json:"policy"` // "open" (default), "closed" or "local"
	Replicas int           `json:"replicas"`
	Timeout  time.Duration `json:"timeout"`
}

// outboundReport is what one helper process sent.
type outboundReport struct {
	Sent      int     `json:"sent"`      // requests handed to the network
	Throttled int     `json:"throttled"` // answers 429 or 503 from the partner
	Waited    int64   `json:"waited"`    // nanoseconds spent in the Transport before sending, summed over requests
	Refused   int     `json:"refused"`   // requests not sent: their wait would have outlasted the run
	Errors    int     `json:"errors"`    // other failures
	FirstErr  string  `json:"first_err"` // the first of them
	Sends     []int64 `json:"sends"`     // wall-clock UnixNano of every send
	Learned   []int64 `json:"learned"`   // wall-clock UnixNano at which a throttling answer was returned to the worker
	Answered  []int64 `json:"answered"`  // wall-clock UnixNano at which each answer was returned to the worker
}

// sendRecorder is the Transport's base: it notes when each admitted
// request goes to the network, and changes nothing.
type sendRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	at   []int64
}

// sentAtKey is the context key of the *atomic.Int64 in which the recorder
// stores a request's send time for its worker.
type sentAtKey struct{}

func (s *sendRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	s.at = append(s.at, now)
	s.mu.Unlock()
	if at, ok := req.Context().Value(sentAtKey{}).(*atomic.Int64); ok {
		at.Store(now)
	}
	return s.base.RoundTrip(req)
}

func (s *sendRecorder) snapshot() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.at...)
}

// TestOutboundHelperProcess is not a test: it is the body of the helper
// processes of the outbound tests. Run directly, it returns at once.
func TestOutboundHelperProcess(t *testing.T) {
	raw := os.Getenv(envOutbound)
	if raw == "" {
		return
	}
	var cfg outboundConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("helper: decode %s: %v", envOutbound, err)
	}
	if err := runOutbound(t.Context(), cfg, os.Stdin, os.Stdout); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

func runOutbound(ctx context.Context, cfg outboundConfig, in io.Reader, out io.Writer) error {
	rdb := newClient(cfg.Target, 8)
	defer rdb.Close()
	opts := []slidelimit.Option{slidelimit.WithPrefix(cfg.Prefix), slidelimit.WithTimeout(cfg.Timeout)}
	switch cfg.Policy {
	case "closed":
		opts = append(opts, slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	case "local":
		opts = append(opts, slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithReplicas(cfg.Replicas))
	}
	lim, err := slidelimit.New(rdb, cfg.Limit.limit(), opts...)
	if err != nil {
		return err
	}
	rec := &sendRecorder{base: &http.Transport{MaxIdleConnsPerHost: cfg.Workers}}
	client := &http.Client{Transport: httplimit.NewTransport(lim, httplimit.WithBase(rec))}
	if _, err := lim.Peek(ctx, "warm-up"); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	if _, err := lim.Blocked(ctx, "warm-up"); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	fmt.Fprintln(out, lineReady)
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for the start signal: %w", err)
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Run)
	defer cancel()
	var mu sync.Mutex
	var rep outboundReport
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; runCtx.Err() == nil; i++ {
				url := fmt.Sprintf("%s/?w=%d&i=%d", cfg.URL, w, i)
				sentAt := new(atomic.Int64)
				req, err := http.NewRequestWithContext(context.WithValue(runCtx, sentAtKey{}, sentAt), http.MethodGet, url, nil)
				if err != nil {
					panic(err) // not reached: the URL is the test's own
				}
				start := time.Now()
				resp, err := client.Do(req)
				learned := time.Now()
				mu.Lock()
				if sent := sentAt.Load(); sent != 0 {
					rep.Waited += sent - start.UnixNano()
				}
				switch {
				case err == nil:
					rep.Answered = append(rep.Answered, learned.UnixNano())
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
						rep.Throttled++
						rep.Learned = append(rep.Learned, learned.UnixNano())
					}
				case errors.Is(err, slidelimit.ErrWouldExceedDeadline) || runCtx.Err() != nil:
					// The limit cannot admit it before the run ends: this
					// worker is done.
					rep.Refused++
					mu.Unlock()
					return
				default:
					if rep.Errors == 0 {
						rep.FirstErr = err.Error()
					}
					rep.Errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.Sends = rec.snapshot()
	rep.Sent = len(rep.Sends)
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, lineResult+string(b))
	return nil
}

// startOutbound starts n outbound helper processes with cfg and waits until
// each is ready. They are killed when the test ends, if still running.
func startOutbound(t *testing.T, n int, cfg outboundConfig) []*helper {
	t.Helper()
	return spawnHelpers(t, n, "TestOutboundHelperProcess", envOutbound, cfg, cfg.Run+60*time.Second)
}

// goOutbound sends every helper the start signal.
func goOutbound(t *testing.T, hs []*helper) {
	t.Helper()
	for i, h := range hs {
		if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
			t.Fatalf("helper %d: send start: %v", i, err)
		}
	}
}

// collectOutbound waits for every helper's report.
func collectOutbound(t *testing.T, hs []*helper) []outboundReport {
	t.Helper()
	reps := make([]outboundReport, len(hs))
	for i, h := range hs {
		raw, err := h.await(lineResult)
		if err != nil {
			t.Fatalf("helper %d: no result: %v\n%s", i, err, h.stderr)
		}
		if err := json.Unmarshal([]byte(raw), &reps[i]); err != nil {
			t.Fatalf("helper %d: decode result: %v", i, err)
		}
		_ = h.stdin.Close()
		if err := h.cmd.Wait(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("helper %d: %v\n%s", i, err, h.stderr)
		}
	}
	return reps
}
