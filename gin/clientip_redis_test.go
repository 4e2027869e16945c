package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

// TestGinClientIPSpoof records why ClientIP is the documented key behind a
// proxy: Gin's c.ClientIP() reads only the first X-Forwarded-For line, so a
// client whose proxy appends a second line picks its own identity, while
// ClientIP.Key holds it to the limit.
func TestGinClientIPSpoof(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	send := func(mw gin.HandlerFunc) int {
		r := gin.New()
		if err := r.SetTrustedProxies([]string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
		r.Use(mw)
		r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		n := 0
		for i := range 20 {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "127.0.0.1:40000"
			req.Header.Add("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1)) // the client's
			req.Header.Add("X-Forwarded-For", "203.0.113.77")                    // the proxy's
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code == http.StatusOK {
				n++
			}
		}
		return n
	}
	proxies, err := slidelimit.ParseTrustedProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	gin1 := send(ginlimit.New(newLimiter(t, rdb, slidelimit.Per(5, time.Minute)), ginlimit.WithKey(ginlimit.KeyByGinClientIP)))
	ours := send(ginlimit.New(newLimiter(t, rdb, slidelimit.Per(5, time.Minute)), ginlimit.WithKey(ginlimit.ClientIP{TrustedProxies: proxies}.Key)))
	t.Logf("20 requests, forged first X-Forwarded-For line: KeyByGinClientIP admitted %d, ClientIP.Key admitted %d", gin1, ours)
	if ours != 5 {
		t.Errorf("ClientIP.Key admitted %d of 20, want 5", ours)
	}
	if gin1 != 20 {
		t.Errorf("KeyByGinClientIP admitted %d of 20, want 20 (Gin reads only the first line; if this changed, update the caveat)", gin1)
	}
}
