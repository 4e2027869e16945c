package integration

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// arrivalPartner stands for a partner API: it records the time of every
// request that reaches it, and answers the throttled one with 429 and a
// Retry-After.
type arrivalPartner struct {
	*httptest.Server
	mu         sync.Mutex
	arrivals   []time.Time
	throttle   int    // the arrival, counted from 1, answered 429; 0 for none
	retryAfter string // its Retry-After
	throttled  time.Time
}

func newArrivalPartner(t *testing.T, throttle int, retryAfter string) *arrivalPartner {
	t.Helper()
	p := &arrivalPartner{throttle: throttle, retryAfter: retryAfter}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		p.mu.Lock()
		p.arrivals = append(p.arrivals, now)
		throttle := len(p.arrivals) == p.throttle
		if throttle {
			p.throttled = now
		}
		p.mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", p.retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

// seen returns the arrivals, in order, and the time of the throttling answer.
func (p *arrivalPartner) seen() ([]time.Time, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := slices.Clone(p.arrivals)
	slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
	return a, p.throttled
}

// maxInWindow returns the most arrivals any interval [s, s+window) holds,
// over every s at or after from.
func maxInWindow(arrivals []time.Time, window time.Duration, from time.Time) int {
	most, j := 0, 0
	for i, a := range arrivals {
		if a.Before(from) {
			continue
		}
		j = max(j, i)
		for j < len(arrivals) && arrivals[j].Before(a.Add(window)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// commandCalls returns the commands a Redis server has executed, from INFO
// commandstats, leaving out INFO itself, in total and by command.
func commandCalls(t *testing.T, rdb *redis.Client) (int64, map[string]int64) {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var total int64
	by := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, stats, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", sc.Text(), err)
		}
		total += n
		by[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return total, by
}

// scriptedCommands returns the commands the core's Lua scripts call, in
// lower case as INFO commandstats names them: Redis counts each of their
// calls too, though no client sent it.
func scriptedCommands(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../core/internal/script/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("the core's scripts: %v, %d files", err, len(files))
	}
	names := make(map[string]bool)
	re := regexp.MustCompile(`call\('([A-Za-z]+)'`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			names[strings.ToLower(string(m[1]))] = true
		}
	}
	return names
}

// privateRedis starts a Redis for one test, whose command counts are its own.
func privateRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

// The fleet of the outbound tests: 4 processes of 32 workers share a
// partner's quota of 100 per 10 s.
const (
	outboundProcesses = 4
	outboundWorkers   = 32
	partnerQuota      = 100
	partnerWindow     = 10 * time.Second
	// outboundMargin is added to the limiter's window: the limiter records an
	// admission when Redis decides, the partner counts the request when it
	// arrives, and the spread of the delay between the two must not let
	// two windows' requests into one of the partner's. See the README's
	// "Limiting your own outgoing calls".
	outboundMargin = 100 * time.Millisecond
)

func TestOutboundFleetSharesAPartnerQuota(t *testing.T) {
	long(t)
	_, rdb := privateRedis(t)
	p := newArrivalPartner(t, 0, "")
	const run = 30 * time.Second
	cfg := outboundConfig{
		Target:  target{Addrs: []string{rdb.Options().Addr}},
		Prefix:  redistest.Prefix(t),
		URL:     p.URL,
		Limit:   limitSpec{Quota: partnerQuota, Window: partnerWindow + outboundMargin},
		Workers: outboundWorkers,
		Run:     run,
		Timeout: 10 * time.Second, // a timeout would fail open: let the busy machine answer
	}
	hs := startOutbound(t, outboundProcesses, cfg)
	busyLoops(t, 2, run+20*time.Second)
	before, byBefore := commandCalls(t, rdb)
	goOutbound(t, hs)
	reps := collectOutbound(t, hs)
	executed, by := commandCalls(t, rdb)
	executed -= before
	// The commands the fleet sent: Redis also counts those its scripts
	// call, one EVALSHA running a dozen.
	scripted := scriptedCommands(t)
	var calls int64
	for name, n := range by {
		by[name] = n - byBefore[name]
		if !scripted[name] {
			calls += by[name]
		}
	}

	arrivals, _ := p.seen()
	sent, throttled, refused := 0, 0, 0
	var waited time.Duration
	for i, r := range reps {
		if r.Errors > 0 {
			t.Errorf("helper %d: %d errors, the first %s", i, r.Errors, r.FirstErr)
		}
		sent += r.Sent
		throttled += r.Throttled
		refused += r.Refused
		waited += time.Duration(r.Waited)
	}
	if sent != len(arrivals) {
		t.Fatalf("helpers sent %d requests, the partner saw %d", sent, len(arrivals))
	}
	allowed := partnerQuota * int((run+partnerWindow-1)/partnerWindow)
	most := maxInWindow(arrivals, partnerWindow, time.Time{})
	perSent := float64(calls) / float64(max(sent, 1))
	t.Logf("fleet of %d processes x %d workers, %v, limit %d per %v (+%v margin): sent %d of the %d the partner allows (%.1f%%), at most %d in any %v at the partner, %d Redis commands sent (%.2f per request sent), %v waited on average per request sent, %d refused at the end of the run, %d throttled",
		outboundProcesses, outboundWorkers, run, partnerQuota, partnerWindow, outboundMargin, sent, allowed, 100*float64(sent)/float64(allowed),
		most, partnerWindow, calls, perSent, (waited / time.Duration(max(sent, 1))).Round(time.Millisecond), refused, throttled)
	t.Logf("Redis commands by name, those run inside scripts included (%d in all, %.2f per request sent): %v", executed, float64(executed)/float64(max(sent, 1)), by)
	if most > partnerQuota {
		t.Errorf("the partner saw %d requests in one %v window, want at most %d", most, partnerWindow, partnerQuota)
	}
	if sent*100 < allowed*95 {
		t.Errorf("the fleet sent %d requests, want at least 95%% of the %d the limit allows in %v", sent, allowed, run)
	}
	if perSent > 3 {
		t.Errorf("%d Redis commands for %d requests sent = %.2f each, want at most 3", calls, sent, perSent)
	}
	if throttled != 0 {
		t.Errorf("the partner throttled %d requests, want 0", throttled)
	}
}

func TestOutboundFleetObeysAPartnerThrottle(t *testing.T) {
	long(t)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { testPartnerThrottle(t, b.client(t)) })
	}
}

// testPartnerThrottle runs the throttle scenario against rdb: the block
// shares the identity's hash slot, so Redis Cluster holds it as well.
func testPartnerThrottle(t *testing.T, rdb redis.UniversalClient) {
	// The partner answers its 20th request 429, Retry-After: 5.
	p := newArrivalPartner(t, 20, "5")
	const run = 9 * time.Second
	limit := limitSpec{Quota: 1000, Window: partnerWindow}
	cfg := outboundConfig{
		Target:  targetOf(t, rdb),
		Prefix:  redistest.Prefix(t),
		URL:     p.URL,
		Limit:   limit,
		Workers: 8,
		Run:     run,
		Timeout: 10 * time.Second,
	}
	identity := "host:" + strings.TrimPrefix(p.URL, "http://")
	blockKey := cfg.Prefix + "{" + identity + "}:!blocked" // as Limiter.Block documents
	hs := startOutbound(t, outboundProcesses, cfg)
	busyLoops(t, 2, run+20*time.Second)
	goOutbound(t, hs)
	// The block's key holds the Redis time it began; read it while it lasts.
	var began string
	deadline := time.Now().Add(run)
	for began == "" && time.Now().Before(deadline) {
		v, err := rdb.Get(t.Context(), blockKey).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s: %v", blockKey, err)
		}
		began = v
		time.Sleep(10 * time.Millisecond)
	}
	reps := collectOutbound(t, hs)
	_, throttledAt := p.seen()
	if throttledAt.IsZero() || began == "" {
		t.Fatalf("the partner throttled at %v, the block began at %q: want both", throttledAt, began)
	}

	// In Redis: nothing was admitted from the block's start to its end.
	start, err := strconv.ParseInt(began, 10, 64)
	if err != nil {
		t.Fatalf("block key holds %q, want microseconds", began)
	}
	key, err := slidelimit.Key(cfg.Prefix, identity, limit.limit())
	if err != nil {
		t.Fatalf("Key: %v", err)
	}
	end := start + (5 * time.Second).Microseconds()
	during, err := rdb.ZCount(t.Context(), key, "("+began, "("+strconv.FormatInt(end, 10)).Result()
	if err != nil {
		t.Fatalf("ZCOUNT: %v", err)
	}
	admittedBefore, err := rdb.ZCount(t.Context(), key, "-inf", began).Result()
	if err != nil {
		t.Fatalf("ZCOUNT: %v", err)
	}

	// At the partner: what was sent before the block's end was admitted
	// before it began, and sending resumed within a second of its end.
	var learned time.Time
	var sends []time.Time
	for i, r := range reps {
		if r.Errors > 0 {
			t.Errorf("helper %d: %d errors, the first %s", i, r.Errors, r.FirstErr)
		}
		for _, at := range r.Learned {
			learned = time.Unix(0, at)
		}
		for _, at := range r.Sends {
			sends = append(sends, time.Unix(0, at))
		}
	}
	slices.SortFunc(sends, func(x, y time.Time) int { return x.Compare(y) })
	blockEnd := throttledAt.Add(5 * time.Second)
	inFlight, afterLearned, sentBeforeEnd := 0, 0, 0
	var resumed time.Time
	for _, s := range sends {
		switch {
		case s.Before(blockEnd):
			sentBeforeEnd++
			if s.After(throttledAt) && (learned.IsZero() || s.Before(learned)) {
				inFlight++
			} else if s.After(throttledAt) {
				afterLearned++
			}
		case resumed.IsZero():
			resumed = s
		}
	}
	t.Logf("429 answered at +0; the throttled worker had it at +%v; %d requests sent in between, %d sent after it by workers admitted before the block was recorded; %d admitted in Redis during the 5 s block; sending resumed at +%v",
		learned.Sub(throttledAt).Round(time.Microsecond), inFlight, afterLearned, during, resumed.Sub(throttledAt).Round(time.Millisecond))
	// The Transport moves a request's unit to when its response came
	// (Limiter.Shift) when that is more than 25 ms after its admission, and
	// never later: a request admitted before the block whose answer came
	// after the block began is scored in the block's span. Any other unit
	// there was admitted during the block.
	answeredAfter := 0
	for _, r := range reps {
		for _, at := range r.Answered {
			if at > start*1000 {
				answeredAfter++
			}
		}
	}
	if during > int64(answeredAfter) {
		t.Errorf("Redis holds %d units scored during the partner's 5 s Retry-After, and only %d requests were answered after it began; want no admission during the block", during, answeredAfter)
	}
	// Units scored in the block's span are those of requests answered
	// after it began, admitted before it (as above).
	if int64(sentBeforeEnd) > admittedBefore+during {
		t.Errorf("%d requests reached the network before the block ended, but only %d were admitted before it began", sentBeforeEnd, admittedBefore+during)
	}
	if resumed.IsZero() || resumed.After(blockEnd.Add(time.Second)) {
		t.Errorf("sending resumed at +%v after the 429, want within 1 s of +5s", resumed.Sub(throttledAt))
	}
}

func TestOutboundFleetWhenRedisFails(t *testing.T) {
	long(t)
	for _, policy := range []string{"local", "closed"} {
		t.Run(policy, func(t *testing.T) {
			srv, rdb := privateRedis(t)
			p := newArrivalPartner(t, 0, "")
			const (
				run    = 8 * time.Second
				quota  = 40
				window = 2 * time.Second
			)
			cfg := outboundConfig{
				Target:   target{Addrs: []string{rdb.Options().Addr}},
				Prefix:   redistest.Prefix(t),
				URL:      p.URL,
				Limit:    limitSpec{Quota: quota, Window: window + outboundMargin},
				Workers:  8,
				Run:      run,
				Policy:   policy,
				Replicas: outboundProcesses,
				Timeout:  200 * time.Millisecond,
			}
			hs := startOutbound(t, outboundProcesses, cfg)
			busyLoops(t, 2, run+20*time.Second)
			goOutbound(t, hs)
			time.Sleep(3 * time.Second) // let the fleet wait on Redis's decisions
			stopped := time.Now()
			srv.Stop()
			reps := collectOutbound(t, hs)
			arrivals, _ := p.seen()
			// Requests Redis admitted just before it stopped may still be
			// on their way; the policy decides everything sent after.
			from := stopped.Add(100 * time.Millisecond)
			after := 0
			for _, a := range arrivals {
				if !a.Before(from) {
					after++
				}
			}
			before := len(arrivals) - after
			// The policy's shares are judged by when the workers sent, as
			// FailClosed's are below: the partner, in this busy test
			// process, counts a request when it gets round to it, which
			// may put one sent in a window past the margin into the next.
			var sends []time.Time
			for i, r := range reps {
				if r.Errors > 0 {
					t.Errorf("helper %d: %d errors, the first %s", i, r.Errors, r.FirstErr)
				}
				for _, at := range r.Sends {
					sends = append(sends, time.Unix(0, at))
				}
			}
			slices.SortFunc(sends, func(x, y time.Time) int { return x.Compare(y) })
			most := maxInWindow(sends, window, from)
			t.Logf("FailurePolicy %s: %d requests before Redis stopped, %d after; at most %d sent in any %v after (%d counted by the partner)",
				policy, before, after, most, window, maxInWindow(arrivals, window, from))
			if before == 0 {
				t.Errorf("no request was sent while Redis ran")
			}
			switch policy {
			case "local":
				if after == 0 {
					t.Errorf("no request was sent after Redis stopped, want FailLocal's shares")
				}
				if most > quota {
					t.Errorf("%d requests sent in one %v window after Redis stopped, want at most the quota %d: each process holds a quarter", most, window, quota)
				}
			case "closed":
				// Judged by when the workers sent, not when the partner,
				// in this busy test process, got round to counting.
				sentAfter := 0
				for _, r := range reps {
					for _, at := range r.Sends {
						if !time.Unix(0, at).Before(from) {
							sentAfter++
						}
					}
				}
				if sentAfter != 0 {
					t.Errorf("%d requests sent after Redis stopped (%d counted by the partner after it), want none under FailClosed", sentAfter, after)
				}
			}
		})
	}
}
