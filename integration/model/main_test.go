package model

import (
	"context"
	"flag"
	"fmt"
	"io"
	stdlog "log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestMain keeps the output of a failing run readable to its end. The
// checker stops, pauses and kills Redis on purpose, so go-redis's pool and
// the limiters' outage log would print hundreds of expected lines after a
// failure; unless -v asks for them, they are dropped, and every failure
// of TestModel is said again, with its seed, as the run's last lines, where
// a CI log's tail shows it.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		redis.SetLogger(quietLogger{})
		stdlog.SetDefault(stdlog.New(stdlog.NewTextHandler(io.Discard, nil)))
	}
	code := m.Run()
	summaries.Lock()
	if code != 0 && len(summaries.lines) > 0 {
		fmt.Fprintf(os.Stderr, "\nmodel: %d failure(s):\n%s\n", len(summaries.lines), strings.Join(summaries.lines, "\n"))
	}
	summaries.Unlock()
	os.Exit(code)
}

// summaries holds the failures TestMain says again at the end.
var summaries struct {
	sync.Mutex
	lines []string
}

// summarize records one failure for TestMain's closing lines, cut to a
// length a CI log's tail keeps.
func summarize(s string) {
	const most = 2000
	if len(s) > most {
		s = s[:most] + "…"
	}
	summaries.Lock()
	summaries.lines = append(summaries.lines, s)
	summaries.Unlock()
}

// quietLogger drops go-redis's own log lines (a pool that cannot dial a
// Redis the checker stopped).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
