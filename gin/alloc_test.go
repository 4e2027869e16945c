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

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Gin's own: at most two allocations, Redis's round trip
// included (the decision's block and the identity).
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(t)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	perRequest := func(mw ...gin.HandlerFunc) float64 {
		r := gin.New()
		r.GET("/", append(mw, func(c *gin.Context) { c.String(http.StatusOK, "ok") })...)
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:41000"
		return testing.AllocsPerRun(200, func() {
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET / = %d, want 200", rec.Code)
			}
		})
	}
	bare, limited := perRequest(), perRequest(ginlimit.New(lim))
	t.Logf("allocations per admitted request: %.1f bare, %.1f behind the limiter", bare, limited)
	if limited-bare > 2.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most 2", limited-bare)
	}
}
