package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// shadowDenials counts the shadow denials a limiter observes.
type shadowDenials struct{ n atomic.Int64 }

func (s *shadowDenials) observe(_ context.Context, o slidelimit.Observation) {
	if o.Outcome() == slidelimit.OutcomeShadowDenied {
		s.n.Add(1)
	}
}

// TestShadowStreams opens six streams against a limit of five: in shadow
// mode all six run, the sixth without rate-limit fields; without it the
// sixth ends with ResourceExhausted.
func TestShadowStreams(t *testing.T) {
	rdb := redistest.Client(t)
	for _, shadow := range []bool{true, false} {
		var seen shadowDenials
		opts := []slidelimit.Option{slidelimit.WithObserver(seen.observe)}
		if shadow {
			opts = append(opts, slidelimit.WithShadow())
		}
		lim := newLimiter(t, rdb, slidelimit.Per(5, 10*time.Second), opts...)
		srv := startServer(t, nil, []grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(lim)})
		conn := dial(t, srv.addr)
		for i := range 6 {
			cs, err := conn.NewStream(t.Context(), chatDesc, methodChat)
			if err != nil {
				t.Fatalf("shadow %v: stream %d: NewStream: %v", shadow, i+1, err)
			}
			_ = cs.SendMsg(wrapperspb.String("hi")) // may fail once the server has refused the stream
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if i == 5 && !shadow {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("stream 6 without shadow mode: RecvMsg = %v, want ResourceExhausted", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("shadow %v: stream %d: RecvMsg = %v, want a message", shadow, i+1, err)
			}
			hdr, err := cs.Header()
			if err != nil {
				t.Fatalf("shadow %v: stream %d: Header: %v", shadow, i+1, err)
			}
			if got, want := len(rateLimitFields(hdr)) > 0, i < 5; got != want {
				t.Errorf("shadow %v: stream %d has rate-limit header fields %v, want %v: %v", shadow, i+1, got, want, hdr)
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatalf("shadow %v: stream %d: CloseSend: %v", shadow, i+1, err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
				t.Fatalf("shadow %v: stream %d: end = %v, want io.EOF", shadow, i+1, err)
			}
		}
		if got, want := seen.n.Load(), map[bool]int64{true: 1, false: 0}[shadow]; got != want {
			t.Errorf("shadow %v: observer saw %d shadow denials, want %d", shadow, got, want)
		}
		if got, want := srv.echo.handled.Load(), map[bool]int64{true: 6, false: 5}[shadow]; got != want {
			t.Errorf("shadow %v: handler ran %d times, want %d", shadow, got, want)
		}
	}
}
