package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestClientIPScenarios runs the proxy scenarios every adapter runs
// against real Redis: forged and appended X-Forwarded-For lines, Forwarded,
// IPv4-mapped addresses, an X-Forwarded-For-only proxy in front of several
// clients, and untrusted peers; from a peer written IPv4 and IPv4-mapped.
func TestClientIPScenarios(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, sc := range redistest.ClientIPScenarios() {
		for _, peer := range []string{"127.0.0.1:40000", "[::ffff:127.0.0.1]:40000"} {
			t.Run(sc.Name+" from "+peer, func(t *testing.T) {
				t.Parallel()
				lim := newLimiter(t, rdb, slidelimit.Per(redistest.ClientIPLimit, time.Minute))
				key := httplimit.ClientIP{TrustedProxies: sc.TrustedProxies, Header: sc.Header}.Key
				h := httplimit.New(lim, httplimit.WithKey(key))(ok)
				admitted := map[string]int{}
				for _, req := range sc.Requests {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r.RemoteAddr = peer
					for _, f := range req.Header {
						r.Header.Add(f[0], f[1])
					}
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					switch w.Code {
					case http.StatusOK:
						admitted[req.Client]++
					case http.StatusTooManyRequests:
					default:
						t.Fatalf("status %d, want 200 or 429", w.Code)
					}
				}
				sc.Check(t, admitted)
			})
		}
	}
}
