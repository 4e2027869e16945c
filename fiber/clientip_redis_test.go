package fiberlimit_test

import (
	"io"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

// serveScenario sends the requests of sc to c, from its loopback peer,
// and counts the admitted ones by client.
func serveScenario(t *testing.T, c *client, sc redistest.ClientIPScenario) map[string]int {
	t.Helper()
	admitted := map[string]int{}
	for _, r := range sc.Requests {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Header {
			req.Header.Add(f[0], f[1])
		}
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatalf("GET / error = %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			admitted[r.Client]++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d, want 200 or 429", resp.StatusCode)
		}
	}
	return admitted
}

// TestFiberIPCaveats records why ClientIP is the documented key behind a
// proxy: with Fiber's own ProxyHeader (X-Real-IP, trusted proxy check and
// IP validation on), an IPv4-mapped X-Real-IP is keyed as the proxy, and
// behind a proxy that sends only X-Forwarded-For all clients share the
// proxy's quota or, as here, believes the X-Real-IP each client forges. It
// fails if Fiber ever gets these right, so that the caveats of KeyByFiberIP
// are updated.
func TestFiberIPCaveats(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, sc := range redistest.ClientIPScenarios() {
		if sc.Name != "IPv4-mapped X-Real-IP" && sc.Name != "X-Forwarded-For-only proxy, several clients" {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			fiberApp := newApp(fiber.Config{ProxyHeader: "X-Real-Ip", EnableTrustedProxyCheck: true, TrustedProxies: []string{"127.0.0.1"}, EnableIPValidation: true})
			fiberApp.Use(fiberlimit.New(newLimiter(t, rdb, slidelimit.Per(redistest.ClientIPLimit, time.Minute)), fiberlimit.Config{KeyGenerator: fiberlimit.KeyByFiberIP}))
			fiberApp.Get("/", ok)
			theirs := serveScenario(t, serve(t, fiberApp), sc)
			t.Logf("%s, limit %d per client: KeyByFiberIP (ProxyHeader X-Real-IP) admitted %v; ClientIP.Key admits %v", sc.Name, redistest.ClientIPLimit, theirs, sc.Want)
			if maps.Equal(theirs, sc.Want) {
				t.Errorf("KeyByFiberIP admitted exactly %v: Fiber resolves this now; update the caveats of KeyByFiberIP", theirs)
			}
		})
	}
}
