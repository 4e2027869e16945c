package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Example sends chat completions of max_tokens 800 through the proxy, under
// 3 requests and 1,000 tokens a minute per API key, to an API that reports
// 50 tokens used each: each request reserves 809 tokens and is settled to
// 50, so the next finds room, and the fourth is denied by the request
// limit. A request that may use more tokens than the limit ever admits,
// and one without an API key, are refused before they are counted.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":40,"total_tokens":50}}`)
	}))
	defer api.Close()
	upstream, _ := url.Parse(api.URL)
	s := settings{
		upstream:         upstream,
		rpm:              slidelimit.PerMinute(3).ForRequests().Named("rpm"),
		tpm:              tokenLimit(1000, time.Minute),
		inFlight:         slidelimit.InFlight(2, time.Minute).Named("inflight"),
		defaultMaxTokens: 4096,
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, s.tpm, slidelimit.WithLimits(s.rpm, s.inFlight), slidelimit.WithPrefix("example:llmproxy:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(context.Background(), slidelimit.HeaderIdentity("authorization", "sk-example")) // a clean slate
	handler := newHandler(lim, s)

	send := func(key string, maxTokens int) {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Say hello."}],"max_tokens":%d}`, maxTokens)
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Print(w.Code)
		if w.Code == http.StatusTooManyRequests {
			var denial struct{ Policy string }
			_ = json.Unmarshal(w.Body.Bytes(), &denial)
			fmt.Print(" denied by ", denial.Policy)
		}
		if rl := w.Header().Get("RateLimit"); rl != "" {
			// Each limit's t (seconds until it resets) is left out: the
			// token limit counts in steps, so its t is 60 or 61 by where
			// in its step the request falls.
			fmt.Print(" RateLimit: ", resetField.ReplaceAllString(rl, ""))
		}
		fmt.Println()
	}
	for range 4 {
		send("sk-example", 800)
	}
	send("sk-example", 1000)
	send("", 800)
	// Output:
	// 200 RateLimit: "tpm";r=191, "rpm";r=2
	// 200 RateLimit: "tpm";r=141, "rpm";r=1
	// 200 RateLimit: "tpm";r=91, "rpm";r=0
	// 429 denied by rpm RateLimit: "tpm";r=850, "rpm";r=0
	// 400
	// 401
}

// resetField matches a RateLimit field's t parameter.
var resetField = regexp.MustCompile(`;t=[0-9]+`)
