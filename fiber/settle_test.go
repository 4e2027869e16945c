package fiberlimit_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

// TestStreamOnARealServer: through Fiber's own server, a body stream
// writer keeps the request's place in flight until the stream has been
// sent, and the request is settled to the usage at its end.
func TestStreamOnARealServer(t *testing.T) {
	t.Parallel()
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(100),
		slidelimit.WithLimits(slidelimit.InFlight(1, time.Minute)))
	app := newApp()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		Cost:   func(*fiber.Ctx) int { return 20 },
		Settle: httplimit.TotalTokens,
	}))
	release := make(chan struct{})
	app.Get("/stream", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString("data: {\"usage\":null}\n\n")
			_ = w.Flush()
			<-release
			_, _ = w.WriteString("data: {\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
		})
		return nil
	})
	app.Get("/ok", ok)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	base := "http://" + ln.Addr().String()

	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	stream := get("/stream")
	first := make([]byte, len("data: {\"usage\":null}\n\n"))
	if _, err := io.ReadFull(stream.Body, first); err != nil { // the stream is under way
		t.Fatal(err)
	}
	if r := get("/ok"); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a request while the stream is under way = %d, want 429", r.StatusCode)
	}
	close(release)
	if _, err := io.ReadAll(stream.Body); err != nil {
		t.Fatal(err)
	}
	id := slidelimit.IPIdentity("127.0.0.1", 0)
	deadline := time.Now().Add(5 * time.Second) // fasthttp ends the request just after the last byte
	for {
		res, err := lim.Peek(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		got := [2]int{res.Statuses[0].Remaining, res.Statuses[1].Remaining}
		if got == [2]int{93, 1} {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stream: remaining %v, want [93 1] (settled to 7, the place given back)", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := get("/ok"); r.StatusCode != http.StatusOK {
		t.Errorf("a request after the stream = %d, want 200", r.StatusCode)
	}
}
