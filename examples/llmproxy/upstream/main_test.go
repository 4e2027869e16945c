package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testUpstream returns the fake's handler, answering at once.
func testUpstream(t *testing.T) (*upstream, http.Handler) {
	t.Helper()
	t.Setenv("MIN_LATENCY", "0s")
	t.Setenv("MAX_LATENCY", "0s")
	t.Setenv("WINDOW", "1m")
	u, err := newUpstream()
	if err != nil {
		t.Fatal(err)
	}
	return u, u.handler()
}

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestCompletionReportsUsage(t *testing.T) {
	_, h := testUpstream(t)
	// 3 + (3 + 1 + 3 + 1) tokens of prompt: "one", "ninebytes", "x".
	body := `{"messages":[{"role":"user","content":"one ninebytes x"}],"max_tokens":50}`
	for range 20 {
		w := post(h, "sk-1", body)
		var resp struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
			t.Fatalf("POST = %d %s: %v", w.Code, w.Body, err)
		}
		u := resp.Usage
		if u.Prompt != 11 || u.Completion < 1 || u.Completion > 50 || u.Total != u.Prompt+u.Completion {
			t.Errorf("usage = %+v, want 11 prompt tokens and 1 to 50 more", u)
		}
		if want := map[bool]string{true: "length", false: "stop"}[u.Completion == 50]; resp.Choices[0].FinishReason != want {
			t.Errorf("finish_reason = %q for %d tokens of 50, want %q", resp.Choices[0].FinishReason, u.Completion, want)
		}
	}
	if w := post(h, "", body); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without a key = %d, want 401", w.Code)
	}
	if w := post(h, "sk-1", `{"max_tokens":5}`); w.Code != http.StatusBadRequest {
		t.Errorf("POST without messages = %d, want 400", w.Code)
	}
}

func TestStreamEndsWithUsage(t *testing.T) {
	_, h := testUpstream(t)
	for _, withUsage := range []bool{true, false} {
		body := `{"messages":[{"content":"hi"}],"max_tokens":20,"stream":true}`
		if withUsage {
			body = `{"messages":[{"content":"hi"}],"max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`
		}
		w := post(h, "sk-1", body)
		var data []string
		sc := bufio.NewScanner(w.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = append(data, d)
			}
		}
		if len(data) < 2 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("stream = %q, want chunks and [DONE]", data)
		}
		last := data[len(data)-2]
		if got := strings.Contains(last, `"total_tokens"`); got != withUsage {
			t.Errorf("include_usage %v: the last chunk is %s", withUsage, last)
		}
	}
}

func TestStatsCountWindowsAndInFlight(t *testing.T) {
	u, h := testUpstream(t)
	t0 := time.Now()
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	u.log = []record{
		{Key: "a", Arrived: at(0), InFlight: 1, Total: 100},
		{Key: "a", Arrived: at(30 * time.Second), InFlight: 2, Total: 200},
		{Key: "b", Arrived: at(40 * time.Second), InFlight: 1, Total: 5},
		{Key: "a", Arrived: at(60 * time.Second), InFlight: 1, Total: 300}, // the first has left the window
		{Key: "a", Arrived: at(61 * time.Second), Aborted: true},
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var s struct{ Keys map[string]keyStats }
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	want := keyStats{Requests: 4, Aborted: 1, Tokens: 600, MaxInFlight: 2, MaxRequestsWin: 3, MaxTokensWin: 500}
	if s.Keys["a"] != want {
		t.Errorf("stats of a = %+v, want %+v", s.Keys["a"], want)
	}
}

func TestClientLeaving(t *testing.T) {
	t.Setenv("MIN_LATENCY", "1h")
	t.Setenv("MAX_LATENCY", "1h")
	u, err := newUpstream()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"messages":[{"content":"hi"}]}`))
	r.Header.Set("Authorization", "Bearer sk-1")
	done := make(chan struct{})
	go func() { u.handler().ServeHTTP(httptest.NewRecorder(), r); close(done) }()
	for u.stats().Keys["sk-1"] == nil {
		time.Sleep(time.Millisecond)
	}
	if got := u.stats().Keys["sk-1"].InFlight; got != 1 {
		t.Errorf("in flight while waiting = %d, want 1", got)
	}
	cancel()
	<-done
	if got := *u.stats().Keys["sk-1"]; got.InFlight != 0 || got.Aborted != 1 || got.Tokens != 0 {
		t.Errorf("after the client left: %+v, want nothing in flight, 1 aborted, 0 tokens", got)
	}
}
