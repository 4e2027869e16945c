package llmlimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"github.com/slidelimit/slidelimit/llm"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// fakeAPI answers as an OpenAI-compatible or Anthropic API does, with a
// usage of input tokens and output tokens, JSON or streamed, and records
// the bodies it got.
type fakeAPI struct {
	input, output int
	status        int // 0: 200
	hold          chan struct{}
	mu            sync.Mutex
	bodies        []string
}

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.bodies = append(a.bodies, string(b))
	a.mu.Unlock()
	if a.hold != nil {
		<-a.hold
	}
	w.Header().Set("X-Ratelimit-Remaining-Tokens", "999999") // an upstream's own, replaced
	if a.status != 0 {
		w.WriteHeader(a.status)
		return
	}
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(b, &req)
	anthropic := strings.HasSuffix(r.URL.Path, "/messages")
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		if anthropic {
			fmt.Fprintf(w, `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":%d,"output_tokens":%d}}`, a.input, a.output)
			return
		}
		fmt.Fprintf(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, a.input, a.output, a.input+a.output)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if anthropic {
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n", a.input)
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":%d}}\n\n", a.output)
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return
	}
	null := ""
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		null = `,"usage":null`
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]%s}\n\n", null)
	w.(http.Flusher).Flush()
	if null != "" {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", a.input, a.output, a.input+a.output)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// limited returns api behind the middleware, every request of one key of
// one team of one org, with limits.
func limited(t *testing.T, api http.Handler, key, team, org llmlimit.Limits, opts ...llmlimit.Option) http.Handler {
	t.Helper()
	return limitedOn(t, redistest.Client(t), api, key, team, org, opts...)
}

// limitedOn is limited on the Redis rdb; the org is the bearer token's
// part before its first '-', so that orgs fall on different slots of a
// Cluster.
func limitedOn(t *testing.T, rdb redis.UniversalClient, api http.Handler, key, team, org llmlimit.Limits, opts ...llmlimit.Option) http.Handler {
	t.Helper()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	callers := func(r *http.Request, _ llmlimit.Request) (llmlimit.Caller, error) {
		k := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if k == "" {
			return llmlimit.Caller{}, llmlimit.ErrUnknownCaller
		}
		orgID, _, _ := strings.Cut(k, "-")
		return llmlimit.Caller{Levels: []llmlimit.Level{
			{Name: "org", ID: orgID, Limits: org},
			{Name: "team", ID: "ml", Limits: team},
			{Name: "key", ID: k, Limits: key},
		}}, nil
	}
	return llmlimit.New(lim, callers, opts...)(api)
}

func send(h http.Handler, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	r.Header.Set("Accept-Encoding", "gzip")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func header(t *testing.T, w *httptest.ResponseRecorder, name string) int {
	t.Helper()
	n, err := strconv.Atoi(w.Header().Get(name))
	if err != nil {
		t.Fatalf("%s = %q, want a number (status %d, %s)", name, w.Header().Get(name), w.Code, w.Body)
	}
	return n
}

const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`

// chatEstimate is chat's estimate: 32 bytes of messages, 8 tokens, and 100.
const chatEstimate = 108

func TestSettlesJSONAndStreamsExactly(t *testing.T) {
	api := &fakeAPI{input: 7, output: 20}
	h := limited(t, api, llmlimit.Limits{Requests: 10, Tokens: 1000}, llmlimit.Limits{}, llmlimit.Limits{})
	w := send(h, "/v1/chat/completions", "sk-1", chat)
	if w.Code != 200 || header(t, w, llmlimit.FieldRemainingTokens) != 1000-chatEstimate || header(t, w, llmlimit.FieldRemainingRequests) != 9 {
		t.Fatalf("first request = %d %v", w.Code, w.Header())
	}
	w = send(h, "/v1/chat/completions", "sk-1", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stream":true}`)
	if got, want := header(t, w, llmlimit.FieldRemainingTokens), 1000-27-chatEstimate; w.Code != 200 || got != want {
		t.Fatalf("second request: remaining tokens %d, want %d: the first settled to its 27 tokens", got, want)
	}
	if strings.Contains(w.Body.String(), "total_tokens") || !strings.Contains(w.Body.String(), "[DONE]") {
		t.Errorf("a client that did not ask for usage got %q, want the stream without the usage chunk", w.Body)
	}
	if got := api.bodies[1]; !strings.Contains(got, `"include_usage":true`) {
		t.Errorf("the API got %s, want include_usage asked for", got)
	}
	w = send(h, "/v1/chat/completions", "sk-1", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`)
	if got, want := header(t, w, llmlimit.FieldRemainingTokens), 1000-27-27-chatEstimate; got != want {
		t.Errorf("third request: remaining tokens %d, want %d: the stream settled to its 27 tokens", got, want)
	}
	if !strings.Contains(w.Body.String(), `"total_tokens":27`) {
		t.Errorf("a client that asked for usage got %q, want the usage chunk", w.Body)
	}
	if w.Header().Get("X-Ratelimit-Remaining-Tokens") == "999999" {
		t.Errorf("the upstream's own field reached the client")
	}
}

func TestDeniesAsOpenAIDoes(t *testing.T) {
	h := limited(t, &fakeAPI{input: 100}, llmlimit.Limits{Requests: 2}, llmlimit.Limits{Tokens: 5000}, llmlimit.Limits{})
	for range 2 {
		if w := send(h, "/v1/chat/completions", "sk-1", chat); w.Code != 200 {
			t.Fatalf("status %d, want 200", w.Code)
		}
	}
	w := send(h, "/v1/chat/completions", "sk-1", chat)
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 429 || body.Error.Type != "requests" || body.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("third request = %d %s, want 429 of type requests", w.Code, w.Body)
	}
	if ra := header(t, w, "Retry-After"); ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %d, want 1 to 60", ra)
	}
	if header(t, w, llmlimit.FieldRemainingRequests) != 0 || w.Header().Get(llmlimit.FieldResetRequests) == "" {
		t.Errorf("fields = %v", w.Header())
	}
	// The team's tokens bind the other keys of the team: 200 used, then
	// embeddings of 101 tokens reserved and 100 used while 101 are left.
	admitted := 0
	for i := range 60 {
		w = send(h, "/v1/embeddings", fmt.Sprint("sk-", i+2), `{"input":"`+strings.Repeat("x", 400)+`"}`)
		if w.Code != 200 {
			break
		}
		admitted++
	}
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 429 || body.Error.Type != "tokens" || admitted != (5000-200-101)/100+1 {
		t.Errorf("after %d embeddings: %d %s, want 429 of type tokens", admitted, w.Code, w.Body)
	}
}

func TestAnthropicMessages(t *testing.T) {
	api := &fakeAPI{input: 12, output: 30}
	h := limited(t, api, llmlimit.Limits{Tokens: 500, Requests: 2}, llmlimit.Limits{}, llmlimit.Limits{})
	msg := `{"model":"claude","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`
	est := (len(`[{"role":"user","content":"hi"}]`)+3)/4 + 200
	w := send(h, "/v1/messages", "sk-1", msg)
	if w.Code != 200 || header(t, w, llmlimit.FieldAnthropicTokensRemaining) != 500-est {
		t.Fatalf("first = %d %v", w.Code, w.Header())
	}
	if _, err := time.Parse(time.RFC3339, w.Header().Get(llmlimit.FieldAnthropicTokensReset)); err != nil {
		t.Errorf("reset: %v", err)
	}
	w = send(h, "/v1/messages", "sk-1", strings.Replace(msg, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if got, want := header(t, w, llmlimit.FieldAnthropicTokensRemaining), 500-42-est; got != want {
		t.Errorf("second: remaining %d, want %d", got, want)
	}
	if !strings.Contains(w.Body.String(), "message_delta") {
		t.Errorf("stream = %q", w.Body)
	}
	w = send(h, "/v1/messages", "sk-1", msg)
	var body struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 429 || body.Type != "error" || body.Error.Type != "rate_limit_error" || w.Header().Get("Retry-After") == "" {
		t.Errorf("third = %d %s %v, want Anthropic's 429", w.Code, w.Body, w.Header())
	}
}

func TestRefusedAnswersAreGivenBack(t *testing.T) {
	h := limited(t, &fakeAPI{status: 400}, llmlimit.Limits{Requests: 1, Tokens: 1000}, llmlimit.Limits{}, llmlimit.Limits{})
	for i := range 3 {
		if w := send(h, "/v1/chat/completions", "sk-1", chat); w.Code != 400 || header(t, w, llmlimit.FieldRemainingRequests) != 0 {
			t.Fatalf("request %d = %d, want the API's 400, each given back", i, w.Code)
		}
	}
}

func TestHostileBodiesNeverReachTheAPI(t *testing.T) {
	api := &fakeAPI{}
	h := limited(t, api, llmlimit.Limits{Tokens: 1000}, llmlimit.Limits{}, llmlimit.Limits{}, llmlimit.WithMaxBody(1<<10))
	for _, tt := range []struct {
		path, key, body string
		status          int
	}{
		{"/v1/chat/completions", "sk-1", `{"messages":`, 400},
		{"/v1/chat/completions", "sk-1", `{"max_tokens":"x"}`, 400},
		{"/v1/chat/completions", "sk-1", `null`, 400},
		{"/v1/chat/completions", "sk-1", `{"max_tokens":9223372036854775807}`, 400},
		{"/v1/chat/completions", "sk-1", `{"input":"` + strings.Repeat("x", 2000) + `"}`, 413},
		{"/v1/chat/completions", "sk-1", `{"max_tokens":5000}`, 400},
		{"/v1/chat/completions", "", chat, 401},
		{"/v1/messages", "sk-1", `{"max_tokens":[]}`, 400},
	} {
		w := send(h, tt.path, tt.key, tt.body)
		if w.Code != tt.status || !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s %.40s = %d %s, want %d with a JSON body", tt.path, tt.body, w.Code, w.Body, tt.status)
		}
	}
	if len(api.bodies) != 0 {
		t.Errorf("the API got %d requests, want none", len(api.bodies))
	}
	if w := send(h, "/v1/models", "", ""); w.Code != 200 {
		t.Errorf("an unlimited path = %d, want it passed on", w.Code)
	}
}

func TestInFlightAndShadow(t *testing.T) {
	api := &fakeAPI{input: 1, output: 1, hold: make(chan struct{})}
	h := limited(t, api, llmlimit.Limits{InFlight: 1}, llmlimit.Limits{}, llmlimit.Limits{Tokens: 10000},
		llmlimit.WithLease(time.Second))
	done := make(chan int)
	go func() { done <- send(h, "/v1/chat/completions", "sk-1", chat).Code }()
	for {
		api.mu.Lock()
		n := len(api.bodies)
		api.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // past the lease: renewals keep the place
	if w := send(h, "/v1/chat/completions", "sk-1", chat); w.Code != 429 {
		t.Errorf("second request in flight = %d, want 429", w.Code)
	}
	close(api.hold)
	if code := <-done; code != 200 {
		t.Errorf("first = %d", code)
	}
	if w := send(h, "/v1/chat/completions", "sk-1", chat); w.Code != 200 {
		t.Errorf("after the first ended = %d, want 200", w.Code)
	}
}

func TestOnRedisCluster(t *testing.T) {
	h := limitedOn(t, redistest.ClusterClient(t), &fakeAPI{input: 7, output: 20},
		llmlimit.Limits{Requests: 2, Tokens: 1000}, llmlimit.Limits{}, llmlimit.Limits{Tokens: 5000})
	// Orgs of every name, so on several slots: each settles, and its key's
	// requests bind on their own.
	for i := range 6 {
		key := fmt.Sprintf("org%d-key", i)
		for n, left := range []int{1000 - chatEstimate, 1000 - 27 - chatEstimate} {
			if w := send(h, "/v1/chat/completions", key, chat); w.Code != 200 || header(t, w, llmlimit.FieldRemainingTokens) != left {
				t.Fatalf("%s request %d = %d %v, want 200 with %d tokens left", key, n, w.Code, w.Header(), left)
			}
		}
		if w := send(h, "/v1/chat/completions", key, chat); w.Code != 429 {
			t.Errorf("%s third request = %d, want 429", key, w.Code)
		}
	}
}

func TestNilLimiterOrCallersFail(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"nil limiter": llmlimit.New(nil, func(*http.Request, llmlimit.Request) (llmlimit.Caller, error) {
			return llmlimit.Caller{Levels: []llmlimit.Level{{Name: "key", ID: "k", Limits: llmlimit.Limits{Requests: 1}}}}, nil
		}, llmlimit.WithErrorHook(func(*http.Request, error) {}))(&fakeAPI{}),
		"nil callers": llmlimit.New(nil, nil, llmlimit.WithErrorHook(func(*http.Request, error) {}))(&fakeAPI{}),
	} {
		if w := send(h, "/v1/chat/completions", "sk-1", chat); w.Code != 500 || !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s: %d %s, want 500 with a JSON body", name, w.Code, w.Body)
		}
	}
}

// TestBudgetsOfBillionsCountEveryToken: a key's 2,000,000 tokens a minute
// under an org's 50,000,000,000 a month, counted by the token: a request
// reserves its estimate (108 tokens) and is settled to its usage (27).
func TestBudgetsOfBillionsCountEveryToken(t *testing.T) {
	org := llmlimit.Limits{TokensPerMonth: 50_000_000_000}
	key := llmlimit.Limits{Tokens: 2_000_000}
	h := limited(t, &fakeAPI{input: 7, output: 20}, key, llmlimit.Limits{}, org)
	for _, want := range []int{2_000_000 - 108, 2_000_000 - 27 - 108} {
		w := send(h, "/v1/chat/completions", "sk-1", chat)
		if w.Code != 200 || header(t, w, llmlimit.FieldLimitTokens) != 2_000_000 || header(t, w, llmlimit.FieldRemainingTokens) != want {
			t.Errorf("%d, limit %s, remaining %s, want 200, 2000000 and %d", w.Code,
				w.Header().Get(llmlimit.FieldLimitTokens), w.Header().Get(llmlimit.FieldRemainingTokens), want)
		}
	}
}
