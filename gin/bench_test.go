package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	ginlimit "github.com/slidelimit/slidelimit/gin"
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
	for _, tc := range []struct {
		name string
		mw   []gin.HandlerFunc
	}{{"bare", nil}, {"limited", []gin.HandlerFunc{ginlimit.New(lim)}}} {
		b.Run(tc.name, func(b *testing.B) {
			r := gin.New()
			r.GET("/", append(tc.mw, func(c *gin.Context) { c.String(http.StatusOK, "ok") })...)
			req := httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.1:41000"
			b.ReportAllocs()
			for range b.N {
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET / = %d, want 200", rec.Code)
				}
			}
		})
	}
}
