package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/llm"
)

// Example sends chat completions of max_tokens 800 through the proxy for
// a key of 3 requests and 1,000 tokens a minute, to an API that reports 50
// tokens used each: each request reserves 810 tokens (a token per
// 4 bytes of its messages, and its max_tokens) and is settled to 50,
// so the next finds room, and the fourth is denied by the request limit.
// A request that may use more tokens than the key's limit ever admits,
// and one without an API key, are refused before they are counted.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":40,"total_tokens":50}}`)
	}))
	defer api.Close()
	upstream, _ := url.Parse(api.URL)
	c := &config{Window: duration{time.Minute}, Lease: duration{time.Minute}, Keys: map[string]level{
		"sk-example": {Limits: llmlimit.Limits{Requests: 3, Tokens: 1000}},
	}}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithPrefix(fmt.Sprint("example:llmproxy:", time.Now().UnixNano(), ":")))
	if err != nil {
		panic(err)
	}
	handler := newHandler(lim, c, upstream)

	send := func(key string, maxTokens int) {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Say hello."}],"max_tokens":%d}`, maxTokens)
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		var e struct{ Error struct{ Type string } }
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(w.Code, e.Error.Type, w.Header().Get("X-Ratelimit-Remaining-Requests"), w.Header().Get("X-Ratelimit-Remaining-Tokens"))))
	}
	for range 4 {
		send("sk-example", 800)
	}
	send("sk-example", 1000)
	send("", 800)
	// Output:
	// 200  2 190
	// 200  1 140
	// 200  0 90
	// 429 requests 0 850
	// 400 invalid_request_error
	// 401 invalid_request_error
}
