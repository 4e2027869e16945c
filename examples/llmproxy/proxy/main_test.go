package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"github.com/slidelimit/slidelimit/llm"
)

// TestMain gives the example a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// writeConfig writes a config file of the test's own and returns its path.
func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llmproxy.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testProxy returns a proxy to api under cfg, on the test's own keys.
func testProxy(t *testing.T, api http.Handler, cfg string) http.Handler {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	upstream, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := readConfig(writeConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.PerMinute(1), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	return newHandler(lim, c, upstream)
}

// post sends a chat completion request with body to h as key.
func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// usageAPI answers every request with a usage of total tokens, as JSON or,
// for a streamed request that asks for it, as a last chunk, and records
// the bodies it received.
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
		if strings.Contains(string(b), `"include_usage":true`) {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"choices":[],"usage":%s}`, usage)
}

// tokensLeft returns the x-ratelimit-remaining-tokens of w.
func tokensLeft(w *httptest.ResponseRecorder) string {
	return w.Header().Get(llmlimit.FieldRemainingTokens)
}

const oneKey = `{"keys":{"*":{"limits":{"requests":100,"tokens":1000,"inFlight":2}}}}`

func TestShippedConfig(t *testing.T) {
	c, err := readConfig("llmproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("X-Api-Key", "sk-alice") // as Anthropic's clients send it
	caller, err := c.caller(r, llmlimit.Request{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range caller.Levels {
		got = append(got, l.Name+":"+l.ID)
	}
	if strings.Join(got, " ") != "org:acme team:research key:sk-alice" || caller.Levels[2].Shadow.Requests != 30 || caller.Levels[0].Limits.TokensPerMonth != 1000000 {
		t.Errorf("sk-alice's caller = %+v, want org acme, team research and the key, with their limits", caller)
	}
	if _, err := c.caller(httptest.NewRequest(http.MethodPost, "/", nil), llmlimit.Request{}); !errors.Is(err, llmlimit.ErrUnknownCaller) {
		t.Errorf("no key: %v, want ErrUnknownCaller", err)
	}
	if c.Window.String() != "1m0s" || c.Lease.String() != "1m0s" || c.RedisTimeout.String() != "100ms" {
		t.Errorf("durations = %+v", c)
	}
}

func TestBadConfigs(t *testing.T) {
	for _, cfg := range []string{
		`{`, `{"window":"soon"}`, `{"keys":{"sk-1":{"in":"nowhere"}}}`,
		`{"teams":{"t":{"in":"nowhere"}}}`, `{"keys":{"sk-1":{"limits":{"requests":"many"}}}}`,
	} {
		if _, err := readConfig(writeConfig(t, cfg)); err == nil {
			t.Errorf("readConfig(%s) = nil error, want one", cfg)
		}
	}
	if _, err := readConfig(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing config: nil error, want one")
	}
}

func TestAPIKeys(t *testing.T) {
	h := testProxy(t, &usageAPI{total: 1}, `{"keys":{"sk-1":{"limits":{"requests":5}}}}`)
	body := `{"messages":[{"content":"hi"}],"max_tokens":10}`
	for key, want := range map[string]int{"": 401, "sk-2": 401, "sk-1": 200} {
		if w := post(h, key, body); w.Code != want {
			t.Errorf("POST as %q = %d %s, want %d", key, w.Code, w.Body, want)
		}
	}
}

func TestStreamAsksForUsageAndSettles(t *testing.T) {
	api := &usageAPI{total: 30}
	h := testProxy(t, api, oneKey)
	body := `{"model":"m","messages":[{"content":"hi"}],"max_tokens":200,"stream":true,"stream_options":{"other":1},"temperature":0.5}`
	w := post(h, "sk-stream", body)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "[DONE]") || strings.Contains(w.Body.String(), "total_tokens") {
		t.Fatalf("streamed POST = %d %q, want 200 and the events without the usage it did not ask for", w.Code, w.Body)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(api.bodies[0]), &sent); err != nil {
		t.Fatal(err)
	}
	opts, _ := sent["stream_options"].(map[string]any)
	if opts["include_usage"] != true || opts["other"] != float64(1) || sent["temperature"] != 0.5 || sent["model"] != "m" {
		t.Errorf("the API received %s, want stream_options.include_usage true and every other field kept", api.bodies[0])
	}
	// ⌈17/4⌉ + 200 reserved for [{"content":"hi"}], settled to 30.
	if got, want := tokensLeft(post(h, "sk-stream", body)), fmt.Sprint(1000-30-205); got != want {
		t.Errorf("after a streamed request of 30 tokens, %s tokens left, want %s", got, want)
	}
}

func TestRefusedRequestsAreGivenBack(t *testing.T) {
	h := testProxy(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"no such model"}}`, http.StatusNotFound)
	}), oneKey)
	body := `{"messages":[{"content":"hi"}],"max_tokens":100}`
	post(h, "sk-refused", body)
	w := post(h, "sk-refused", body)
	if w.Code != http.StatusNotFound || tokensLeft(w) != "895" || w.Header().Get(llmlimit.FieldRemainingRequests) != "99" {
		t.Errorf("after a refused request: %d %v, want 404 with 895 tokens and 99 requests left (the first given back)", w.Code, w.Header())
	}
}

func TestTeamInFlightAcrossKeys(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	h := testProxy(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, `{"usage":{"total_tokens":5}}`)
	}), `{"teams":{"t":{"limits":{"inFlight":2}}},"keys":{"sk-a":{"in":"t"},"sk-b":{"in":"t"},"sk-c":{"limits":{"inFlight":1}}}}`)
	body := `{"messages":[{"content":"hi"}],"max_tokens":10}`
	done := make(chan int, 3)
	for _, key := range []string{"sk-a", "sk-b"} {
		go func() { done <- post(h, key, body).Code }()
		<-arrived
	}
	w := post(h, "sk-a", body)
	var denial struct {
		Error struct{ Type, Code, Message string }
	}
	_ = json.Unmarshal(w.Body.Bytes(), &denial)
	if w.Code != http.StatusTooManyRequests || denial.Error.Type != "requests" || !strings.Contains(denial.Error.Message, "team-in-flight") {
		t.Errorf("a third request of the team while two are in flight = %d %s, want 429 by team-in-flight", w.Code, w.Body)
	}
	// A key of no team has places of its own: its request reaches the API.
	go func() { done <- post(h, "sk-c", body).Code }()
	<-arrived
	close(release)
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("a request in flight = %d, want 200", code)
		}
	}
	if w := post(h, "sk-b", body); w.Code != 200 {
		t.Errorf("a request once the others ended = %d, want 200", w.Code)
	}
}

func TestShadowLimitNeverDenies(t *testing.T) {
	h := testProxy(t, &usageAPI{total: 1}, `{"keys":{"*":{"limits":{"requests":5},"shadow":{"requests":1}}}}`)
	for i := range 5 {
		if w := post(h, "sk-shadow", `{"messages":[],"max_tokens":1}`); w.Code != 200 || w.Header().Get(llmlimit.FieldRemainingRequests) != fmt.Sprint(4-i) {
			t.Errorf("request %d = %d %v, want 200 with the enforced limit's fields", i, w.Code, w.Header())
		}
	}
}

func TestRunStopsOnSignal(t *testing.T) {
	rdb := redistest.Client(t)
	t.Setenv("REDIS_ADDRS", rdb.Options().Addr)
	t.Setenv("ADDR", "127.0.0.1:0")
	t.Setenv("CONFIG", writeConfig(t, oneKey))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as SIGTERM would
	if err := run(ctx); err != nil {
		t.Errorf("run after the signal = %v, want nil", err)
	}
}
