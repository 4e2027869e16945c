package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the example a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// testProxy returns a proxy to api under rpm requests and tpm tokens a
// minute and inFlight requests in flight per key, on the test's own keys.
func testProxy(t *testing.T, api http.Handler, rpm, tpm, inFlight int) http.Handler {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	upstream, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := settings{
		upstream:         upstream,
		rpm:              slidelimit.PerMinute(rpm).ForRequests().Named("rpm"),
		tpm:              tokenLimit(tpm, time.Minute),
		inFlight:         slidelimit.InFlight(inFlight, time.Minute).Named("inflight"),
		defaultMaxTokens: 500,
	}
	lim, err := slidelimit.New(redistest.Client(t), s.tpm, slidelimit.WithLimits(s.rpm, s.inFlight), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	return newHandler(lim, s)
}

// post sends a chat completion request with body to h as key, and returns
// the response.
func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// remaining returns the r of the limit name in w's RateLimit header, -1 if
// there is none.
func remaining(w *httptest.ResponseRecorder, name string) int {
	for _, item := range strings.Split(w.Header().Get("RateLimit"), ",") {
		var r, t int
		if _, err := fmt.Sscanf(strings.TrimSpace(item), `"`+name+`";r=%d;t=%d`, &r, &t); err == nil {
			return r
		}
	}
	return -1
}

// usageAPI answers every request with a usage of total tokens, as JSON or,
// for a streamed request, as events, and records the bodies it received.
type usageAPI struct {
	total  int
	mu     sync.Mutex
	bodies []string
}

func (a *usageAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.bodies = append(a.bodies, string(b))
	a.mu.Unlock()
	usage := fmt.Sprintf(`{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}`, a.total-1, a.total)
	if strings.Contains(string(b), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", usage)
		return
	}
	fmt.Fprintf(w, `{"choices":[],"usage":%s}`, usage)
}

func TestEstimate(t *testing.T) {
	api := &usageAPI{total: 7}
	h := testProxy(t, api, 100, 1000, 4)
	for _, tc := range []struct {
		name, body string
		status     int
		estimate   int // the tpm remaining before the settlement: 1000 less this
	}{
		// 3 + (3 + ⌈12/4⌉) + max_tokens
		{"max_tokens", `{"messages":[{"role":"user","content":"twelve bytes"}],"max_tokens":100}`, 200, 109},
		{"max_completion_tokens first", `{"messages":[{"content":"twelve bytes"}],"max_tokens":100,"max_completion_tokens":50}`, 200, 59},
		{"DEFAULT_MAX_TOKENS", `{"messages":[{"content":"twelve bytes"}]}`, 200, 509},
		{"parts", `{"messages":[{"content":[{"type":"text","text":"twelve bytes"}]},{"content":"x"}],"max_tokens":1}`, 200, 3 + 3 + 4 + 3 + 1 + 1},
		{"more than TPM", `{"messages":[{"content":"x"}],"max_tokens":995}`, 400, 0},
		{"no messages", `{"max_tokens":10}`, 400, 0},
		{"not JSON", `max_tokens=10`, 400, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "sk-" + strings.ReplaceAll(tc.name, " ", "-")
			w := post(h, key, tc.body)
			if w.Code != tc.status {
				t.Fatalf("POST %s = %d %s, want %d", tc.body, w.Code, w.Body, tc.status)
			}
			if tc.status != 200 {
				return
			}
			if got := 1000 - remaining(w, "tpm"); got != tc.estimate {
				t.Errorf("POST %s reserved %d tokens, want %d", tc.body, got, tc.estimate)
			}
			// The next request sees the first settled to its 7 tokens.
			if got := 1000 - remaining(post(h, key, tc.body), "tpm"); got != 7+tc.estimate {
				t.Errorf("after a settled request, POST %s leaves %d tokens used, want 7 + %d", tc.body, got, tc.estimate)
			}
		})
	}
}

func TestAPIKeys(t *testing.T) {
	h := testProxy(t, &usageAPI{total: 1}, 100, 1000, 4)
	body := `{"messages":[{"content":"hi"}],"max_tokens":10}`
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("POST without Authorization = %d, want 401", w.Code)
	}

	t.Setenv("API_KEYS", "sk-1, sk-2")
	s, err := readSettings()
	if err != nil {
		t.Fatal(err)
	}
	if !s.keys["sk-1"] || !s.keys["sk-2"] || s.keys["sk-3"] {
		t.Errorf("API_KEYS=sk-1, sk-2 gives keys %v, want sk-1 and sk-2", s.keys)
	}
}

func TestStreamAsksForUsageAndSettles(t *testing.T) {
	api := &usageAPI{total: 30}
	h := testProxy(t, api, 100, 1000, 4)
	body := `{"model":"m","messages":[{"content":"hi"}],"max_tokens":200,"stream":true,"stream_options":{"other":1},"temperature":0.5}`
	w := post(h, "sk-stream", body)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "[DONE]") {
		t.Fatalf("streamed POST = %d %q, want 200 and the events", w.Code, w.Body)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(api.bodies[0]), &sent); err != nil {
		t.Fatal(err)
	}
	opts, _ := sent["stream_options"].(map[string]any)
	if opts["include_usage"] != true || opts["other"] != float64(1) || sent["temperature"] != 0.5 || sent["model"] != "m" {
		t.Errorf("the API received %s, want the request with stream_options.include_usage true and every other field kept", api.bodies[0])
	}
	// 3 + (3 + 1) + 200 reserved, settled to 30.
	if got := 1000 - remaining(post(h, "sk-stream", body), "tpm"); got != 30+207 {
		t.Errorf("after a streamed request of 30 tokens, %d tokens are used, want 30 + 207", got)
	}
}

func TestRefusedRequestsAreGivenBack(t *testing.T) {
	h := testProxy(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"no such model"}}`, http.StatusNotFound)
	}), 100, 1000, 4)
	body := `{"messages":[{"content":"hi"}],"max_tokens":100}`
	post(h, "sk-refused", body)
	w := post(h, "sk-refused", body)
	if w.Code != http.StatusNotFound || remaining(w, "tpm") != 1000-107 || remaining(w, "rpm") != 99 {
		t.Errorf("after a refused request: %d, tpm %d rpm %d left, want 404 with 893 and 99 (the first given back)", w.Code, remaining(w, "tpm"), remaining(w, "rpm"))
	}
}

func TestInFlight(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	h := testProxy(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, `{"usage":{"total_tokens":5}}`)
	}), 100, 1000, 2)
	body := `{"messages":[{"content":"hi"}],"max_tokens":10}`
	done := make(chan int, 3)
	for range 2 {
		go func() { done <- post(h, "sk-busy", body).Code }()
		<-arrived
	}
	w := post(h, "sk-busy", body)
	var denial struct{ Policy string }
	_ = json.Unmarshal(w.Body.Bytes(), &denial)
	if w.Code != http.StatusTooManyRequests || denial.Policy != "inflight" {
		t.Errorf("a third request while two are in flight = %d %s, want 429 by inflight", w.Code, w.Body)
	}
	// Another key has places of its own: its request reaches the API.
	go func() { done <- post(h, "sk-other", body).Code }()
	<-arrived
	close(release)
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("a request in flight = %d, want 200", code)
		}
	}
	if w := post(h, "sk-busy", body); w.Code != 200 {
		t.Errorf("a request once the others ended = %d, want 200", w.Code)
	}
}

func TestReadSettings(t *testing.T) {
	for _, name := range []string{"UPSTREAM", "RPM", "TPM", "INFLIGHT", "WINDOW", "LEASE", "DEFAULT_MAX_TOKENS", "API_KEYS", "REDIS_TIMEOUT"} {
		t.Setenv(name, "")
	}
	s, err := readSettings()
	if err != nil {
		t.Fatal(err)
	}
	if s.upstream.String() != "http://127.0.0.1:9090" || s.rpm.Quota != 60 || !s.rpm.Requests || s.tpm.Quota != 100000 ||
		s.tpm.Window != time.Minute || s.inFlight.Quota != 4 || s.inFlight.Window != 2*time.Minute || s.defaultMaxTokens != 4096 || s.keys != nil || s.redisTimeout != slidelimit.DefaultTimeout {
		t.Errorf("readSettings() = %+v, want the documented defaults", s)
	}
	for name, bad := range map[string]string{"UPSTREAM": "nowhere", "RPM": "0", "TPM": "many", "INFLIGHT": "-1", "WINDOW": "1", "LEASE": "soon", "DEFAULT_MAX_TOKENS": "x", "REDIS_TIMEOUT": "fast"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := readSettings(); err == nil {
				t.Errorf("readSettings with %s=%q = nil error, want one", name, bad)
			}
		})
	}
}

func TestRunStopsOnSignal(t *testing.T) {
	rdb := redistest.Client(t)
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://"+rdb.Options().Addr+"/0")
	t.Setenv("ADDR", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as SIGTERM would
	if err := run(ctx); err != nil {
		t.Errorf("run after the signal = %v, want nil", err)
	}
}
