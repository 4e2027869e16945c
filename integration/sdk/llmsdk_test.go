package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"github.com/slidelimit/slidelimit/llm"
)

// sdkUpstream is a fake OpenAI and Anthropic API: each answer reports a
// usage of 11 input tokens and max_tokens/2 output tokens, JSON or
// streamed, and it adds up the tokens it reported.
type sdkUpstream struct {
	mu       sync.Mutex
	reported int
}

func (u *sdkUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MaxTokens           int  `json:"max_tokens"`
		MaxCompletionTokens int  `json:"max_completion_tokens"`
		Stream              bool `json:"stream"`
		StreamOptions       struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	in, out := 11, max(req.MaxTokens, req.MaxCompletionTokens)/2
	anthropic := strings.HasSuffix(r.URL.Path, "/messages")
	if !anthropic && req.Stream && !req.StreamOptions.IncludeUsage {
		out = 0 // no usage reported: nothing to count
	}
	u.mu.Lock()
	u.reported += in + out
	u.mu.Unlock()
	switch {
	case anthropic && !req.Stream:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`, in, out)
	case anthropic:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n", in)
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
		fmt.Fprint(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", out)
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	case !req.Stream:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out)
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		usage := ""
		if req.StreamOptions.IncludeUsage {
			usage = `,"usage":null`
		}
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]%s}\n\n", usage)
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]%s}\n\n", usage)
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-test\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", in, out, in+out)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// sdkAttempt is one request as it reached the middleware.
type sdkAttempt struct {
	arrived, answered time.Time
	status            int
	header            http.Header
}

// sdkGateway is the middleware in front of a reverse proxy to up, every
// key its own caller of requests per window and 100,000 tokens, with
// every attempt recorded.
type sdkGateway struct {
	url      string
	lim      *slidelimit.Limiter
	window   time.Duration
	mu       sync.Mutex
	attempts []sdkAttempt
}

func newSDKGateway(t *testing.T, up http.Handler, requests int, window time.Duration) *sdkGateway {
	t.Helper()
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	target, _ := url.Parse(upSrv.URL)
	g := &sdkGateway{window: window}
	var err error
	g.lim, err = slidelimit.New(redistest.Client(t), slidelimit.PerMinute(1), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	callers := func(r *http.Request, _ llmlimit.Request) (llmlimit.Caller, error) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "" {
			key = r.Header.Get("X-Api-Key")
		}
		return llmlimit.Caller{Levels: []llmlimit.Level{{Name: "key", ID: key, Limits: llmlimit.Limits{Requests: requests, Tokens: 100_000}}}}, nil
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }}
	limited := llmlimit.New(g.lim, callers, llmlimit.WithWindow(window))(proxy)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := sdkAttempt{arrived: time.Now()}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		limited.ServeHTTP(rec, r)
		a.answered, a.status, a.header = time.Now(), rec.status, w.Header().Clone()
		g.mu.Lock()
		g.attempts = append(g.attempts, a)
		g.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *statusRecorder) Flush()               { http.NewResponseController(r.ResponseWriter).Flush() }

// tokensCounted returns the tokens key's window holds now.
func (g *sdkGateway) tokensCounted(t *testing.T, key string) int {
	t.Helper()
	// A settlement that timed out on a loaded host is kept and retried
	// (Limiter.FlushSettlements): land it before counting.
	if err := g.lim.FlushSettlements(t.Context()); err != nil {
		t.Fatalf("FlushSettlements: %v", err)
	}
	tokens := slidelimit.Per(100_000, g.window).Stepped(g.window / 1000).Named("key-tokens")
	res, err := g.lim.PeekLimits(t.Context(), "key:"+key, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return 100_000 - res.Remaining
}

// TestLLMSDKsSettleExactly sends chat completions with the OpenAI Go SDK
// and messages with Anthropic's, each JSON and streamed, through
// llmlimit to a fake API, and checks that the key's window counts
// exactly the tokens the API reported, though each request reserved its
// max_tokens and more.
func TestLLMSDKsSettleExactly(t *testing.T) {
	up := &sdkUpstream{}
	g := newSDKGateway(t, up, 100, time.Minute)
	ctx := t.Context()
	oa := openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey("sk-usage"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxCompletionTokens: openai.Int(300)}
	chat, err := oa.Chat.Completions.New(ctx, params)
	if err != nil || chat.Usage.TotalTokens != 11+150 {
		t.Fatalf("OpenAI chat completion: %v, usage %+v, want 161 tokens", err, chat)
	}
	// A stream that does not ask for its usage: the middleware asks, and
	// the client sees no usage chunk.
	params.MaxCompletionTokens = openai.Int(200)
	stream := oa.Chat.Completions.NewStreaming(ctx, params)
	var text string
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) == 0 {
			t.Errorf("OpenAI stream: a chunk of no choice (%s) reached a client that did not ask for usage", c.RawJSON())
		} else {
			text += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil || text != "Hi" {
		t.Fatalf("OpenAI stream: %q, %v", text, err)
	}
	// One that asks gets it.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	params.MaxCompletionTokens = openai.Int(100)
	stream = oa.Chat.Completions.NewStreaming(ctx, params)
	var streamed int64
	for stream.Next() {
		streamed = max(streamed, stream.Current().Usage.TotalTokens)
	}
	if err := stream.Err(); err != nil || streamed != 11+50 {
		t.Fatalf("OpenAI stream with usage: %d tokens, %v, want 61", streamed, err)
	}

	an := anthropic.NewClient(anthropicoption.WithBaseURL(g.url), anthropicoption.WithAPIKey("sk-usage"), anthropicoption.WithMaxRetries(0))
	msgParams := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 400,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}
	msg, err := an.Messages.New(ctx, msgParams)
	if err != nil || msg.Usage.InputTokens != 11 || msg.Usage.OutputTokens != 200 {
		t.Fatalf("Anthropic message: %v, %+v", err, msg)
	}
	msgParams.MaxTokens = 60
	mstream := an.Messages.NewStreaming(ctx, msgParams)
	var acc anthropic.Message
	for mstream.Next() {
		if err := acc.Accumulate(mstream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := mstream.Err(); err != nil || acc.Usage.OutputTokens != 30 {
		t.Fatalf("Anthropic stream: %v, usage %+v", err, acc.Usage)
	}

	up.mu.Lock()
	reported := up.reported
	up.mu.Unlock()
	if got := g.tokensCounted(t, "sk-usage"); got != reported {
		t.Errorf("the key's window counts %d tokens, want the %d the API reported", got, reported)
	}
	t.Logf("5 requests through the SDKs: %d tokens reported by the API, %d counted", reported, g.tokensCounted(t, "sk-usage"))
}

// TestLLMSDKsOn429 holds a key to 1 request per 3 s: the SDKs, when they
// retry, wait at least until the reset the 429's header fields said, and
// without retries surface the denial as the API's own error (OpenAI's type
// "requests" and code rate_limit_exceeded, Anthropic's rate_limit_error).
// Each denial follows an admission at once, well within the window even
// on a busy machine.
func TestLLMSDKsOn429(t *testing.T) {
	g := newSDKGateway(t, &sdkUpstream{}, 1, 3*time.Second)
	ctx := t.Context()

	oaParams := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}, MaxTokens: openai.Int(10)}
	oa := openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey("sk-openai"), option.WithMaxRetries(0))
	retrying := openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey("sk-openai"), option.WithMaxRetries(3))
	if _, err := oa.Chat.Completions.New(ctx, oaParams); err != nil {
		t.Fatal(err)
	}
	from := g.count()
	if _, err := retrying.Chat.Completions.New(ctx, oaParams); err != nil {
		t.Fatalf("OpenAI SDK retrying: %v", err)
	}
	g.checkRetries(t, "OpenAI", from, func(h http.Header, answered time.Time) time.Time {
		d, err := time.ParseDuration(h.Get(llmlimit.FieldResetRequests))
		if err != nil {
			t.Fatalf("%s = %q: %v", llmlimit.FieldResetRequests, h.Get(llmlimit.FieldResetRequests), err)
		}
		return answered.Add(d)
	})
	_, err := oa.Chat.Completions.New(ctx, oaParams)
	var oaErr *openai.Error
	if !errors.As(err, &oaErr) || oaErr.StatusCode != http.StatusTooManyRequests || oaErr.Type != "requests" || oaErr.Code != "rate_limit_exceeded" {
		t.Fatalf("OpenAI SDK on a 429: %v, want an *openai.Error of type requests and code rate_limit_exceeded", err)
	}

	anParams := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 10, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}
	an := anthropic.NewClient(anthropicoption.WithBaseURL(g.url), anthropicoption.WithAPIKey("sk-anthropic"), anthropicoption.WithMaxRetries(0))
	anRetrying := anthropic.NewClient(anthropicoption.WithBaseURL(g.url), anthropicoption.WithAPIKey("sk-anthropic"), anthropicoption.WithMaxRetries(3))
	if _, err := an.Messages.New(ctx, anParams); err != nil {
		t.Fatal(err)
	}
	from = g.count()
	if _, err := anRetrying.Messages.New(ctx, anParams); err != nil {
		t.Fatalf("Anthropic SDK retrying: %v", err)
	}
	g.checkRetries(t, "Anthropic", from, func(h http.Header, _ time.Time) time.Time {
		reset, err := time.Parse(time.RFC3339, h.Get(llmlimit.FieldAnthropicRequestsReset))
		if err != nil {
			t.Fatalf("%s = %q: %v", llmlimit.FieldAnthropicRequestsReset, h.Get(llmlimit.FieldAnthropicRequestsReset), err)
		}
		return reset
	})
	_, err = an.Messages.New(ctx, anParams)
	var anErr *anthropic.Error
	if !errors.As(err, &anErr) || anErr.StatusCode != http.StatusTooManyRequests || anErr.Type() != "rate_limit_error" {
		t.Fatalf("Anthropic SDK on a 429: %v, want an *anthropic.Error of type rate_limit_error", err)
	}
}

func (g *sdkGateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.attempts)
}

// checkRetries checks the attempts from the index from on: a 429 or more,
// then a success, each attempt after a 429 no sooner than the reset that
// 429's fields said (resetOf).
func (g *sdkGateway) checkRetries(t *testing.T, sdk string, from int, resetOf func(h http.Header, answered time.Time) time.Time) {
	t.Helper()
	g.mu.Lock()
	attempts := append([]sdkAttempt(nil), g.attempts[from:]...)
	g.mu.Unlock()
	if len(attempts) < 2 || attempts[0].status != http.StatusTooManyRequests || attempts[len(attempts)-1].status != http.StatusOK {
		t.Fatalf("%s SDK: attempts %v, want a 429 then, after its retries, a 200", sdk, statuses(attempts))
	}
	for i, a := range attempts[:len(attempts)-1] {
		if a.status != http.StatusTooManyRequests {
			continue
		}
		reset, next := resetOf(a.header, a.answered), attempts[i+1].arrived
		if next.Before(reset) {
			t.Errorf("%s SDK retried %v before the reset its 429 said (Retry-After %s)", sdk, reset.Sub(next), a.header.Get("Retry-After"))
		}
		t.Logf("%s SDK: a 429 (Retry-After %s), retried %v after it, %v after the reset it said", sdk, a.header.Get("Retry-After"),
			next.Sub(a.answered).Round(time.Millisecond), next.Sub(reset).Round(time.Millisecond))
	}
}

func statuses(attempts []sdkAttempt) []int {
	var s []int
	for _, a := range attempts {
		s = append(s, a.status)
	}
	return s
}
