package adapter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// TestLogErrorLeavesOutagesToTheLimiter: the default hook logs a key
// error, but not a Redis failure, which the limiter reports once per
// outage.
func TestLogErrorLeavesOutagesToTheLimiter(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	ctx := context.Background()
	adapter.LogError(ctx, "testlimit", fmt.Errorf("down: %w", slidelimit.ErrUnavailable), "path", "/a")
	if buf.Len() != 0 {
		t.Errorf("LogError(a Redis failure) logged %q, want nothing", buf.String())
	}
	adapter.LogError(ctx, "testlimit", errors.New("no key"), "path", "/a")
	if got := buf.String(); !strings.Contains(got, "testlimit: rate limit") || !strings.Contains(got, "path=/a") || !strings.Contains(got, "no key") {
		t.Errorf("LogError(a key error) logged %q, want the name, the attributes and the error", got)
	}
}
