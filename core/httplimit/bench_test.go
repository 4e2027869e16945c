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

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis): with -benchmem, the difference
// in allocs/op is what the limiter adds, go-redis included.
func BenchmarkMiddleware(b *testing.B) {
	lim, err := slidelimit.New(redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(b)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", ok}, {"limited", httplimit.New(lim)(ok)}} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.1:41000"
			b.ReportAllocs()
			for range b.N {
				rec := httptest.NewRecorder()
				tc.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET / = %d, want 200", rec.Code)
				}
			}
		})
	}
}
