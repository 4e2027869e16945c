package integration

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fleet of TestLLMProxyFleet: three replicas of examples/llmproxy/proxy
// on one Redis, in front of examples/llmproxy/upstream, with every API key
// held to these limits per llmWindow. The window is short so that a run
// spans several windows; the upstream's latencies stay below the lease, as
// a deployment's LEASE must exceed its longest request.
const (
	llmRPM        = 60
	llmTPM        = 6000
	llmInFlight   = 4
	llmWindow     = 10 * time.Second
	llmLease      = 3 * time.Second
	llmMinLatency = 50 * time.Millisecond
	llmMaxLatency = time.Second
	llmClients    = 16 // per key; four keys, so 64 clients in all
	// The team of sk-tokens-a and sk-tokens-b: fewer tokens and places in
	// flight than its two keys' together, so that the team's limits bind.
	llmTeamTPM      = 9000
	llmTeamInFlight = 6
	// The team's organisation: fewer requests than the team's two keys
	// send together.
	llmOrgRPM = 40
	// llmMargin is taken off the window when the upstream's arrivals are
	// counted: the limiter counts a request when Redis admits it, the
	// upstream when it arrives, a few milliseconds later on an idle machine,
	// and a window of arrivals as long as the limiter's could hold the
	// requests of a window and a bit.
	llmMargin = 250 * time.Millisecond
)

// llmRun is how long the clients send. SLIDELIMIT_LLMPROXY_RUN sets
// another, such as 60s; the default keeps make test short and still spans
// three windows, with the kill in the middle one.
func llmRun(t *testing.T) time.Duration {
	v := os.Getenv("SLIDELIMIT_LLMPROXY_RUN")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 3*llmWindow {
		t.Fatalf("SLIDELIMIT_LLMPROXY_RUN=%q: want a duration of at least %v", v, 3*llmWindow)
	}
	return d
}

// TestLLMProxyFleet runs the llmproxy example as users run it: the upstream
// and three proxy replicas as OS processes on one Redis, and 64 clients on
// four API keys sending chat completions (a third of them streamed) with
// random max_tokens for llmRun. In the middle of the run one replica is
// SIGKILLed while it holds every place in flight of one key. From the
// upstream's record of every request, and Redis's INFO commandstats:
//
//   - no window of arrivals holds more than llmRPM requests of a key, nor
//     more than llmTPM tokens plus the overshoot Settle allows: a request
//     that uses more tokens than it reserved records the excess at its
//     admission, so a window may exceed the quota by what the requests in
//     flight at its last admission exceed their reservations by, at most
//     llmInFlight times the largest excess of the key's requests;
//   - no key ever has more than llmInFlight requests at the upstream;
//   - the team of sk-tokens-a and sk-tokens-b holds its own limits on
//     both together: llmTeamTPM (and the overshoot its places allow) and
//     llmTeamInFlight at the upstream; the team's organisation
//     llmOrgRPM;
//   - the dead replica's places stay taken until their leases end, then the
//     key reaches llmInFlight requests in flight again within the lease;
//     its requests never settled keep their reservations;
//   - the fleet made at most 2 script calls to Redis per request it
//     proxied, 1 per request it denied.
//
// Clients wait 100 to 300 ms after a denial, so that every limit is kept
// at its quota; the figures are logged.
func TestLLMProxyFleet(t *testing.T) {
	run := llmRun(t)
	_, rdb := privateRedis(t)
	bins := buildLLMProxy(t)
	up := startLLMProcess(t, bins["upstream"], "ADDR=127.0.0.1:0",
		"MIN_LATENCY="+llmMinLatency.String(), "MAX_LATENCY="+llmMaxLatency.String(), "WINDOW="+llmWindow.String(), "LOG_REQUESTS=10000000")
	var replicas []*llmProcess
	// Every key, each with a count of its own ("*"), under the same limits;
	// two of them in a team with limits of its own.
	config := filepath.Join(t.TempDir(), "llmproxy.json")
	key := fmt.Sprintf(`{"requests":%d,"tokens":%d,"inFlight":%d}`, llmRPM, llmTPM, llmInFlight)
	if err := os.WriteFile(config, fmt.Appendf(nil, `{"window":%q,"lease":%q,"redisTimeout":"5s",`+
		`"orgs":{"o":{"limits":{"requests":%d}}},"teams":{"ab":{"in":"o","limits":{"tokens":%d,"inFlight":%d}}},`+
		`"keys":{"sk-tokens-a":{"in":"ab","limits":%s},"sk-tokens-b":{"in":"ab","limits":%s},"*":{"limits":%s}}}`,
		llmWindow, llmLease, llmOrgRPM, llmTeamTPM, llmTeamInFlight, key, key, key), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		replicas = append(replicas, startLLMProcess(t, bins["proxy"], "ADDR=127.0.0.1:0", "UPSTREAM=http://"+up.addr,
			"REDIS_ADDRS="+rdb.Options().Addr, "CONFIG="+config))
	}
	victim := replicas[2]
	peek := newLLMPeek(t, rdb.Options().Addr)

	keys := []llmKey{
		{name: "sk-tokens-a", maxTokens: [2]int{16, 1024}},
		{name: "sk-tokens-b", maxTokens: [2]int{16, 1024}},
		{name: "sk-requests", maxTokens: [2]int{8, 48}},
		// The victim's clients use only the replica that is killed, from
		// a few seconds before it is, so that it holds all their places
		// and their whole window is known when it dies.
		{name: "sk-victim", maxTokens: [2]int{32, 32}, longWords: true, pinned: true},
	}
	f := &llmFleet{replicas: replicas, victim: victim, resume: make(chan struct{})}
	_, byBefore := commandCalls(t, rdb)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), run)
	defer cancel()
	killAt := start.Add(run / 2)
	var wg sync.WaitGroup
	for _, k := range keys {
		for c := range llmClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if k.pinned {
					select {
					case <-time.After(time.Until(killAt.Add(-3 * time.Second))):
					case <-ctx.Done():
						return
					}
				}
				f.client(ctx, k, c)
			}()
		}
	}

	// Kill the victim replica at a moment when the victim key's places are
	// all at the upstream, so that every place the replica took is one the
	// upstream sees.
	time.Sleep(time.Until(killAt))
	deadline := time.Now().Add(3 * time.Second)
	for up.inFlight(t, "sk-victim") < llmInFlight && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	f.dead.Store(true)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL the replica: %v", err)
	}
	killed := time.Now()
	_ = victim.cmd.Wait()
	// The victim key's count, with its clients waiting: its requests that
	// the dead replica never settled must count their reservations.
	used, admitted := peek.usage(t, "sk-victim")
	close(f.resume)
	wg.Wait()
	_, by := commandCalls(t, rdb)

	recs := up.requests(t)
	if len(recs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	byKey := make(map[string][]llmRecord)
	for _, r := range recs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	outs := f.outcomes()
	var proxied, denied, failed, fallbacks, killedReqs int
	denials := map[string]int{}
	excess := map[string]int{} // the largest excess of a key's request over its reservation
	for _, o := range outs {
		switch {
		case o.err != "" && o.replica == victim && o.end.After(killed.Add(-time.Second)):
			killedReqs++
		case o.err != "":
			failed++
			if failed <= 3 {
				t.Errorf("%s via replica %s: %s", o.key, o.replica.addr, o.err)
			}
		case o.status == http.StatusOK:
			proxied++
			if !o.limited {
				fallbacks++
			}
			excess[o.key] = max(excess[o.key], o.total-o.estimate)
		case o.status == http.StatusTooManyRequests:
			denied++
			denials[o.policy]++
		default:
			failed++
			t.Errorf("%s via replica %s: status %d", o.key, o.replica.addr, o.status)
		}
	}
	t.Logf("%v with 3 replicas, %d clients on %d keys: %d requests proxied, %d denied %v, %d cut by the kill, %d failed; %d decided without Redis",
		run, llmClients*len(keys), len(keys), proxied, denied, denials, killedReqs, failed, fallbacks)
	if fallbacks > 0 {
		t.Errorf("%d requests were admitted without Redis (no RateLimit header), want none", fallbacks)
	}

	// Windows of requests and tokens, and requests in flight.
	var worstOver int
	for _, k := range keys {
		rs := byKey[k.name]
		allowed := llmInFlight * max(excess[k.name], 0)
		reqs, tokens := maxWindow(rs, llmWindow-llmMargin)
		_, tokensFull := maxWindow(rs, llmWindow)
		most := 0
		for _, r := range rs {
			most = max(most, r.InFlight)
		}
		t.Logf("%s: %d requests at the upstream; busiest window: %d requests, %d tokens (%d over a whole %v of arrivals); the largest excess over a reservation %d tokens, so the overshoot allowed is %d; at most %d in flight",
			k.name, len(rs), reqs, tokens, tokensFull, llmWindow, excess[k.name], allowed, most)
		worstOver = max(worstOver, tokens-llmTPM)
		if reqs > llmRPM {
			t.Errorf("%s: %d requests arrived within %v, want at most %d", k.name, reqs, llmWindow-llmMargin, llmRPM)
		}
		if tokens > llmTPM+allowed {
			t.Errorf("%s: %d tokens used by requests arriving within %v, want at most %d + %d", k.name, tokens, llmWindow-llmMargin, llmTPM, allowed)
		}
		if most > llmInFlight {
			t.Errorf("%s: %d requests in flight at the upstream at once, want at most %d", k.name, most, llmInFlight)
		}
	}
	t.Logf("largest overshoot of TPM in any window: %d tokens", worstOver)

	// The team's limits, on its two keys together.
	team := slices.Concat(byKey["sk-tokens-a"], byKey["sk-tokens-b"])
	slices.SortFunc(team, func(a, b llmRecord) int { return cmp.Compare(a.Arrived, b.Arrived) })
	_, teamTokens := maxWindow(team, llmWindow-llmMargin)
	teamAllowed := llmTeamInFlight * max(excess["sk-tokens-a"], excess["sk-tokens-b"], 0)
	teamMost := mostAtOnce(team)
	t.Logf("team ab (sk-tokens-a, sk-tokens-b): %d requests at the upstream; busiest window %d tokens (team quota %d, overshoot allowed %d); at most %d in flight (team quota %d)",
		len(team), teamTokens, llmTeamTPM, teamAllowed, teamMost, llmTeamInFlight)
	if teamTokens > llmTeamTPM+teamAllowed {
		t.Errorf("team ab: %d tokens used by requests arriving within %v, want at most %d + %d", teamTokens, llmWindow-llmMargin, llmTeamTPM, teamAllowed)
	}
	if teamMost > llmTeamInFlight {
		t.Errorf("team ab: %d requests in flight at the upstream at once, want at most %d", teamMost, llmTeamInFlight)
	}
	// The organisation's, on the team's keys.
	orgRequests, _ := maxWindow(team, llmWindow-llmMargin)
	t.Logf("org o (team ab's keys): busiest window %d requests (org quota %d)", orgRequests, llmOrgRPM)
	if orgRequests > llmOrgRPM {
		t.Errorf("org o: %d requests arrived within %v, want at most %d", orgRequests, llmWindow-llmMargin, llmOrgRPM)
	}

	// The dead replica's places.
	checkLeases(t, byKey["sk-victim"], killed)

	// Its reservations: the victim key's window holds every request it
	// admitted, those that completed at their usage and the others at their
	// reservation (or more, for any the replica answered but died before
	// settling).
	var completed, usage, estimate int
	for _, o := range outs {
		if o.key == "sk-victim" && o.end.Before(killed) && o.status == http.StatusOK {
			completed++
			usage += o.total
			estimate = o.estimate
		}
	}
	if estimate == 0 {
		t.Fatal("sk-victim: no request completed before the kill")
	}
	want := usage + estimate*(admitted-completed)
	t.Logf("sk-victim at the kill: %d requests admitted, %d completed using %d tokens, %d never settled: %d tokens counted, %d if each unsettled request keeps its reservation of %d",
		admitted, completed, usage, admitted-completed, used, want, estimate)
	if admitted-completed < 1 || used < want || used > estimate*admitted {
		t.Errorf("sk-victim: %d tokens counted after the kill, want %d to %d: %d completed requests' usage and %d reservations of %d tokens",
			used, want, estimate*admitted, completed, admitted-completed, estimate)
	}

	// Redis round trips.
	scripted := scriptedCommands(t)
	var calls, other int64
	for name, n := range by {
		n -= byBefore[name]
		switch {
		case name == "evalsha" || name == "evalsha_ro" || name == "eval" || name == "eval_ro":
			calls += n
		case !scripted[name]:
			other += n
		}
	}
	calls -= peek.calls.Load()
	t.Logf("Redis: %d script calls for %d proxied and %d denied requests, %.2f per request (admissions share calls in batches); %d other commands (connections, script loads)",
		calls, proxied, denied, float64(calls)/float64(proxied+denied), other)
	if bound := int64(2*(proxied+killedReqs) + denied); calls > bound {
		t.Errorf("Redis ran %d script calls, want at most 2 per proxied request and 1 per denial: %d", calls, bound)
	}
}

// checkLeases checks the places the victim replica held when it was killed
// at killed: until the earliest of their leases can end, the key never has
// more than llmInFlight less them at the upstream, and within the lease
// after the kill it has llmInFlight again.
func checkLeases(t *testing.T, rs []llmRecord, killed time.Time) {
	t.Helper()
	held, earliest := 0, killed
	var after []llmRecord
	for _, r := range rs {
		arrived := time.Unix(0, r.Arrived)
		if arrived.Before(killed) && (r.Ended == 0 || time.Unix(0, r.Ended).After(killed)) {
			held++
			if arrived.Before(earliest) {
				earliest = arrived
			}
		}
		if arrived.After(killed) {
			after = append(after, r)
		}
	}
	if held == 0 {
		t.Fatal("sk-victim: the killed replica held no request at the upstream")
	}
	// A lease ends llmLease after its admission, which came before the
	// request's arrival: allow the margin for the difference.
	stillHeld := earliest.Add(llmLease - llmMargin)
	var first, full time.Time
	for _, r := range after {
		arrived := time.Unix(0, r.Arrived)
		if first.IsZero() {
			first = arrived
		}
		if arrived.Before(stillHeld) && r.InFlight > llmInFlight-held {
			t.Errorf("sk-victim: %d in flight %v after the kill, while the dead replica's %d places were held (until %v after it at the earliest)",
				r.InFlight, arrived.Sub(killed), held, stillHeld.Sub(killed))
		}
		if r.InFlight == llmInFlight {
			full = arrived
			break
		}
	}
	if full.IsZero() {
		t.Fatalf("sk-victim: %d places held by the killed replica; never %d in flight again after it", held, llmInFlight)
	}
	t.Logf("sk-victim: the killed replica held %d places in flight (the earliest taken %v before the kill); next request at the upstream %v after the kill, %d in flight again %v after it (lease %v)",
		held, killed.Sub(earliest).Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond), llmInFlight, full.Sub(killed).Round(time.Millisecond), llmLease)
	if d := full.Sub(killed); d > llmLease+time.Second {
		t.Errorf("sk-victim: %d in flight again %v after the kill, want within the lease, %v (+1 s for the clients' retries)", llmInFlight, d, llmLease)
	}
}

// maxWindow returns the most requests, and the most tokens they used, of
// rs arriving within any span of window.
func maxWindow(rs []llmRecord, window time.Duration) (requests, tokens int) {
	j, sum := 0, 0
	for i, r := range rs {
		sum += r.Total
		for r.Arrived-rs[j].Arrived >= int64(window) {
			sum -= rs[j].Total
			j++
		}
		requests, tokens = max(requests, i-j+1), max(tokens, sum)
	}
	return requests, tokens
}

// mostAtOnce returns the most of rs at the upstream at once: between its
// arrival and its end (a request cut short, with no end, counts until the
// last end seen).
func mostAtOnce(rs []llmRecord) int {
	type event struct {
		at    int64
		delta int
	}
	var events []event
	var last int64
	for _, r := range rs {
		last = max(last, r.Ended, r.Arrived)
	}
	for _, r := range rs {
		end := r.Ended
		if end == 0 {
			end = last
		}
		events = append(events, event{r.Arrived, 1}, event{end, -1})
	}
	// Ends before arrivals at one instant: a place freed is taken again.
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	n, most := 0, 0
	for _, e := range events {
		n += e.delta
		most = max(most, n)
	}
	return most
}
