package llmlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/llm"
)

// Limit an OpenAI-compatible API per API key, team and organisation: the
// key to 60 requests and 10,000 tokens a minute and 2 requests at once,
// its team to 50,000 tokens a minute, its organisation to a million
// tokens a day, with a tighter limit of 20 requests a minute for keys in
// shadow, counted but not enforced.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	// Its own limit takes no part: each request is held to its caller's.
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithPrefix(fmt.Sprint("example-llm-", time.Now().UnixNano())))
	if err != nil {
		log.Fatal(err)
	}
	callers := func(r *http.Request, _ llmlimit.Request) (llmlimit.Caller, error) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key != "sk-alice" { // look the key up in your configuration
			return llmlimit.Caller{}, llmlimit.ErrUnknownCaller
		}
		return llmlimit.Caller{Levels: []llmlimit.Level{
			{Name: "org", ID: "acme", Limits: llmlimit.Limits{TokensPerDay: 1_000_000}},
			{Name: "team", ID: "ml", Limits: llmlimit.Limits{Tokens: 50_000}},
			{Name: "key", ID: key, Limits: llmlimit.Limits{Requests: 60, Tokens: 10_000, InFlight: 2},
				Shadow: llmlimit.Limits{Requests: 20}},
		}}, nil
	}
	// upstream stands for an httputil.ReverseProxy to the API.
	upstream := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"Hi!"}}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	})
	handler := llmlimit.New(lim, callers)(upstream)

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}],"max_tokens":500}`))
		r.Header.Set("Authorization", "Bearer sk-alice")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		// The first request reserved 9 + 500 tokens and was settled to its 12.
		fmt.Println(w.Code, w.Header().Get("X-Ratelimit-Remaining-Requests"), w.Header().Get("X-Ratelimit-Remaining-Tokens"))
	}
	// Output:
	// 200 59 9491
	// 200 58 9479
}
