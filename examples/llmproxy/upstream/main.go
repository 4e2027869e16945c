// Command upstream is a fake OpenAI-compatible chat completions API, to run
// the llmproxy example against without spending tokens. POST
// /v1/chat/completions answers after a random latency with a made-up reply
// and a usage object, as a chat completion does, or, with "stream":true,
// as Server-Sent Events whose last chunk carries the usage when
// "stream_options":{"include_usage":true} asks for it.
//
// Its tokens are counted the way a model's would be, only cruder: the
// prompt costs 3 tokens for each message, 3 to prime the reply, and one
// for every 4 bytes or part of them of each word; the reply uses a random
// number of tokens up to the request's max_tokens (or
// max_completion_tokens; 256 without either), and all of them, stopping
// for "length", one time in four. Any API key is accepted.
//
// It counts what reaches it, per API key: GET /stats reports, as JSON, the
// requests and tokens of each key, its requests in flight now and at most,
// and its busiest window of WINDOW: the most requests, and tokens, that
// arrived within any WINDOW. GET /requests lists every request it
// recorded (the first LOG_REQUESTS), for tests.
//
// Environment:
//
//	ADDR          listen address (default "127.0.0.1:9090")
//	MIN_LATENCY   the shortest time to answer (default "50ms")
//	MAX_LATENCY   the longest (default "1s")
//	WINDOW        the window of /stats' busiest window (default "1m")
//	LOG_REQUESTS  how many requests to record (default 100000)
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	u, err := newUpstream()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", envOr("ADDR", "127.0.0.1:9090"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: u.handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("upstream listening on %s with latencies of %v to %v", ln.Addr(), u.minLatency, u.maxLatency)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// upstream answers chat completions and counts them. It is safe for
// concurrent use.
type upstream struct {
	minLatency, maxLatency time.Duration
	window                 time.Duration
	logSize                int

	mu       sync.Mutex
	inFlight map[string]int // requests of each key being answered now
	log      []record
	dropped  int // requests not recorded: the log was full
}

// record is one request, as GET /requests lists it.
type record struct {
	Key       string `json:"key"`
	ID        string `json:"id,omitempty"`        // its X-Request-Id
	Arrived   int64  `json:"arrived"`             // Unix nanoseconds
	Ended     int64  `json:"ended"`               // Unix nanoseconds; 0 while in flight
	InFlight  int    `json:"in_flight"`           // the key's requests in flight when it arrived, itself included
	Prompt    int    `json:"prompt_tokens"`       // prompt tokens
	Total     int    `json:"total_tokens"`        // tokens used, 0 if aborted
	Aborted   bool   `json:"aborted,omitempty"`   // its client left before the answer
	Stream    bool   `json:"stream,omitempty"`    // answered as Server-Sent Events
	Truncated bool   `json:"truncated,omitempty"` // the reply stopped for "length"
}

func newUpstream() (*upstream, error) {
	u := &upstream{inFlight: make(map[string]int)}
	var err error
	if u.minLatency, err = duration("MIN_LATENCY", "50ms"); err != nil {
		return nil, err
	}
	if u.maxLatency, err = duration("MAX_LATENCY", "1s"); err != nil {
		return nil, err
	}
	if u.maxLatency < u.minLatency {
		return nil, fmt.Errorf("MAX_LATENCY %v is below MIN_LATENCY %v", u.maxLatency, u.minLatency)
	}
	if u.window, err = duration("WINDOW", "1m"); err != nil || u.window == 0 {
		return nil, fmt.Errorf("WINDOW: %q is not a positive duration", os.Getenv("WINDOW"))
	}
	if u.logSize, err = strconv.Atoi(envOr("LOG_REQUESTS", "100000")); err != nil || u.logSize < 0 {
		return nil, fmt.Errorf("LOG_REQUESTS: %q is not a number", os.Getenv("LOG_REQUESTS"))
	}
	return u, nil
}

func (u *upstream) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", u.complete)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, u.stats()) })
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, _ *http.Request) {
		u.mu.Lock()
		recs := slices.Clone(u.log)
		u.mu.Unlock()
		writeJSON(w, http.StatusOK, recs)
	})
	return mux
}

// chatRequest is what the fake reads of a chat completion request.
type chatRequest struct {
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Stream              bool `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type usage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

func (u *upstream) complete(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		writeError(w, http.StatusUnauthorized, "no API key: send Authorization: Bearer <key>")
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "the body is not a chat completion request with messages")
		return
	}
	maxTokens := 256
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		writeError(w, http.StatusBadRequest, "max_tokens must be at least 1")
		return
	}
	use := usage{Prompt: 3}
	for _, m := range req.Messages {
		use.Prompt += 3 + tokens(m.Content)
	}
	use.Completion = maxTokens
	if rand.IntN(4) > 0 {
		use.Completion = 1 + rand.IntN(maxTokens)
	}
	use.Total = use.Prompt + use.Completion

	c := u.arrive(key, r.Header.Get("X-Request-Id"), use.Prompt, req.Stream)
	c.truncated = use.Completion == maxTokens
	latency := u.minLatency + rand.N(u.maxLatency-u.minLatency+1)
	if req.Stream {
		u.stream(w, r, c, use, req.StreamOptions.IncludeUsage, latency)
		return
	}
	select {
	case <-time.After(latency):
	case <-r.Context().Done():
		u.end(c, 0)
		return
	}
	// The request ends before its answer is sent, so that the count of
	// requests in flight never runs ahead of the proxy's.
	u.end(c, use.Total)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": "fake",
		"choices": []any{map[string]any{
			"index": 0, "message": map[string]string{"role": "assistant", "content": words(use.Completion)},
			"finish_reason": c.finish(),
		}},
		"usage": use,
	})
}

// stream answers as Server-Sent Events: a few chunks spread over latency,
// the usage chunk if asked for, and [DONE].
func (u *upstream) stream(w http.ResponseWriter, r *http.Request, c *call, use usage, withUsage bool, latency time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		_ = rc.Flush()
	}
	chunks := min(use.Completion, 8)
	for i := range chunks {
		select {
		case <-time.After(latency / time.Duration(chunks)):
		case <-r.Context().Done():
			u.end(c, 0)
			return
		}
		var reason any
		if i == chunks-1 {
			u.end(c, use.Total) // before the last chunk, as in complete
			reason = c.finish()
		}
		send(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": words(use.Completion/chunks) + " "}, "finish_reason": reason}},
			"usage":   nil,
		})
	}
	if withUsage {
		send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake", "choices": []any{}, "usage": use})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// call is a request being answered.
type call struct {
	key       string
	i         int // its record in the log; -1 if the log was full
	truncated bool
}

func (c *call) finish() string {
	if c.truncated {
		return "length"
	}
	return "stop"
}

// arrive counts a request of key arriving and records it.
func (u *upstream) arrive(key, id string, prompt int, stream bool) *call {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inFlight[key]++
	c := &call{key: key, i: -1}
	if len(u.log) < u.logSize {
		c.i = len(u.log)
		u.log = append(u.log, record{Key: key, ID: id, Arrived: time.Now().UnixNano(), InFlight: u.inFlight[key], Prompt: prompt, Stream: stream})
	} else {
		u.dropped++
	}
	return c
}

// end counts c ending, having used total tokens; 0 means its client left
// before the answer.
func (u *upstream) end(c *call, total int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inFlight[c.key]--
	if c.i < 0 {
		return
	}
	rec := &u.log[c.i]
	rec.Ended = time.Now().UnixNano()
	rec.Total, rec.Aborted, rec.Truncated = total, total == 0, c.truncated && total > 0
}

// keyStats is what GET /stats reports of one key.
type keyStats struct {
	Requests       int `json:"requests"`
	Aborted        int `json:"aborted"`
	Tokens         int `json:"tokens"`
	InFlight       int `json:"in_flight"`
	MaxInFlight    int `json:"max_in_flight"`
	MaxRequestsWin int `json:"max_requests_per_window"`
	MaxTokensWin   int `json:"max_tokens_per_window"`
}

// stats is what GET /stats reports.
type stats struct {
	Window  string               `json:"window"`
	Keys    map[string]*keyStats `json:"keys"`
	Dropped int                  `json:"not_recorded,omitempty"`
}

// stats sums the log by key. A request counts in the window in which it
// arrived, as a limiter counts it when it admits it.
func (u *upstream) stats() stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := stats{Window: u.window.String(), Keys: make(map[string]*keyStats), Dropped: u.dropped}
	byKey := make(map[string][]record)
	for _, r := range u.log {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	for key, recs := range byKey {
		k := &keyStats{InFlight: u.inFlight[key]}
		j, tokens := 0, 0 // recs[j:i+1] arrived within a window ending at recs[i]
		for i, r := range recs {
			k.Requests++
			k.Tokens += r.Total
			if r.Aborted {
				k.Aborted++
			}
			k.MaxInFlight = max(k.MaxInFlight, r.InFlight)
			tokens += r.Total
			for r.Arrived-recs[j].Arrived >= int64(u.window) {
				tokens -= recs[j].Total
				j++
			}
			k.MaxRequestsWin = max(k.MaxRequestsWin, i-j+1)
			k.MaxTokensWin = max(k.MaxTokensWin, tokens)
		}
		s.Keys[key] = k
	}
	return s
}

// tokens counts the prompt tokens of a message's content: a string, or a
// list of parts whose text parts count.
func tokens(content json.RawMessage) int {
	var text string
	if json.Unmarshal(content, &text) != nil {
		var parts []struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(content, &parts)
		for _, p := range parts {
			text += p.Text + " "
		}
	}
	n := 0
	for _, w := range strings.Fields(text) {
		n += (len(w) + 3) / 4
	}
	return n
}

// words returns n words of filler.
func words(n int) string {
	return strings.TrimSpace(strings.Repeat("lorem ", max(n, 0)))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as an OpenAI-compatible API does.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg, "type": "invalid_request_error"}})
}

func duration(name, def string) (time.Duration, error) {
	d, err := time.ParseDuration(envOr(name, def))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: %q is not a duration of zero or more", name, os.Getenv(name))
	}
	return d, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
