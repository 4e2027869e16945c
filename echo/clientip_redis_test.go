package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

// TestClientIPScenarios runs the proxy scenarios every adapter runs
// against real Redis through ClientIP.Key, from a peer written IPv4 and
// IPv4-mapped.
func TestClientIPScenarios(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, sc := range redistest.ClientIPScenarios() {
		for _, peer := range []string{"127.0.0.1:40000", "[::ffff:127.0.0.1]:40000"} {
			t.Run(sc.Name+" from "+peer, func(t *testing.T) {
				t.Parallel()
				lim := newLimiter(t, rdb, slidelimit.Per(redistest.ClientIPLimit, time.Minute))
				e := echo.New()
				e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
					IdentifierExtractor: echolimit.ClientIP{TrustedProxies: sc.TrustedProxies, Header: sc.Header}.Key,
				}))
				e.GET("/", ok)
				admitted := map[string]int{}
				for _, req := range sc.Requests {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r.RemoteAddr = peer
					for _, f := range req.Header {
						r.Header.Add(f[0], f[1])
					}
					w := httptest.NewRecorder()
					e.ServeHTTP(w, r)
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
