package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// PushbackKey is the trailer by which a server tells gRPC clients whose
// service config has a retry policy how many milliseconds to wait before
// they retry (gRFC A6). Denials carry it.
const PushbackKey = "grpc-retry-pushback-ms"

// verdict is what the interceptors do with one call or message.
type verdict struct {
	// err is the status the call is refused with; nil lets it go on.
	err error
	// md holds the rate-limit fields: for the response headers when err is
	// nil, for the trailers otherwise. It may be nil.
	md metadata.MD
	// res is the limiter's decision, for a refund; lim made it.
	res slidelimit.Result
	lim *slidelimit.Limiter
}

// newCall describes the call to key functions and selectors.
func (c *config) newCall(ctx context.Context, fullMethod string) Call {
	return Call{FullMethod: fullMethod, ClientIP: c.clientIP(ctx)}
}

// skipped reports whether call is exempt from every limit.
func (c *config) skipped(ctx context.Context, call Call) bool {
	if _, ok := lookup(c.skip, call.FullMethod); ok {
		return true
	}
	return c.skipFunc != nil && c.skipFunc(ctx, call)
}

// limiterFor returns call's limiter, nil when it is not limited.
func (c *config) limiterFor(ctx context.Context, call Call) *slidelimit.Limiter {
	if c.choose != nil {
		return c.choose(ctx, call)
	}
	if lim, ok := lookup(c.methods, call.FullMethod); ok {
		return lim
	}
	return c.limiter
}

// identify returns the identity key gives call, or the status to refuse
// the call with.
func (c *config) identify(ctx context.Context, call Call, key KeyFunc) (string, error) {
	id, err := key(ctx, call)
	if err == nil {
		return id, nil
	}
	var st *status.Status
	if s, ok := status.FromError(err); ok {
		st = s
	} else if errors.Is(err, ErrNoIdentity) {
		st = status.New(codes.Unauthenticated, err.Error())
	} else {
		st = status.New(codes.Internal, "grpclimit: cannot identify the caller")
	}
	if st.Code() == codes.Internal || st.Code() == codes.Unknown {
		c.report(ctx, call.FullMethod, fmt.Errorf("grpclimit: key: %w", err))
	}
	return "", st.Err()
}

// costOf returns the units call takes, by WithCost.
func (c *config) costOf(ctx context.Context, call Call) int {
	if c.cost == nil {
		return 1
	}
	return c.cost(ctx, call)
}

// check counts n units for id against lim. With headers, an allowed call's
// verdict carries its rate-limit fields for the response headers.
func (c *config) check(ctx context.Context, fullMethod string, lim *slidelimit.Limiter, id string, n int, headers bool) verdict {
	res, err := lim.AllowN(ctx, id, n)
	switch {
	case err == nil && res.Allowed:
		if !headers || c.noHeaders {
			return verdict{res: res, lim: lim}
		}
		return verdict{md: c.fields(res), res: res, lim: lim}
	case err == nil:
		return verdict{err: exhausted(res), md: c.trailer(res)}
	case ctx.Err() != nil:
		// The caller is gone or out of time: nothing to report.
		return verdict{err: status.FromContextError(ctx.Err()).Err()}
	}
	c.report(ctx, fullMethod, err)
	if !errors.Is(err, slidelimit.ErrUnavailable) {
		// An empty identity from a custom KeyFunc, or a cost out of
		// range: a server fault.
		return verdict{err: status.Error(codes.Internal, "grpclimit: cannot limit the call")}
	}
	if res.Allowed {
		return verdict{} // fail-open: a fallback claims no quota, so no fields
	}
	return verdict{err: unavailable(res), md: c.trailer(res)}
}

// refund gives back the units of v, an admitted call that ended with err,
// when WithRefundFailed or WithRefundSuccessful asks for it.
func (c *config) refund(ctx context.Context, fullMethod string, v verdict, err error) {
	if !c.refundFail && !c.refundOK || v.lim == nil || !v.res.Allowed || v.res.Fallback {
		return
	}
	if failed := c.failed(status.Code(err)); failed && c.refundFail || !failed && c.refundOK {
		// The caller may be gone; the refund is still owed, bounded by the
		// limiter's timeout.
		if rerr := v.lim.Refund(context.WithoutCancel(ctx), v.res); rerr != nil {
			c.report(ctx, fullMethod, fmt.Errorf("grpclimit: refund: %w", rerr))
		}
	}
}

func (c *config) report(ctx context.Context, fullMethod string, err error) {
	if c.onError != nil {
		c.onError(ctx, fullMethod, err)
	}
}

// fields returns res's rate-limit fields as metadata, by the one mapping
// core has for every adapter; nil if there are none.
func (c *config) fields(res slidelimit.Result) metadata.MD {
	var md metadata.MD
	c.headers.Write(res, func(name, value string) {
		if md == nil {
			md = metadata.MD{}
		}
		md.Append(name, value) // lower-cases the name, as gRPC requires
	})
	return md
}

// trailer returns the trailers of a refused call: the rate-limit fields
// and the retry pushback.
func (c *config) trailer(res slidelimit.Result) metadata.MD {
	md := c.fields(res)
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(PushbackKey, strconv.FormatInt(int64(retryDelay(res)/time.Millisecond), 10))
	return md
}

// retryDelay is res.RetryAfter rounded up to whole milliseconds, at least
// one: the delay RetryInfo and the pushback announce, never shorter than
// the true wait.
func retryDelay(res slidelimit.Result) time.Duration {
	d := (res.RetryAfter + time.Millisecond - 1).Truncate(time.Millisecond)
	return max(d, time.Millisecond)
}

// exhausted returns the status of a call res denies: ResourceExhausted with
// RetryInfo and a QuotaFailure naming each denying policy. Neither the
// message nor the details hold the caller's identity.
func exhausted(res slidelimit.Result) error {
	delay := retryDelay(res)
	st := status.New(codes.ResourceExhausted,
		fmt.Sprintf("grpclimit: rate limit %s exceeded, retry in %v", res.Limit, delay))
	qf := &errdetails.QuotaFailure{}
	for _, s := range res.Statuses {
		if s.RetryAfter > 0 {
			qf.Violations = append(qf.Violations, violation(s.Limit))
		}
	}
	if len(qf.Violations) == 0 {
		qf.Violations = append(qf.Violations, violation(res.Limit))
	}
	return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}, qf)
}

func violation(l slidelimit.Limit) *errdetails.QuotaFailure_Violation {
	return &errdetails.QuotaFailure_Violation{
		Subject:     l.String(),
		Description: fmt.Sprintf("quota of %d per %gs exceeded", l.Quota, l.Window.Seconds()),
	}
}

// unavailable returns the status of a call refused because Redis could not
// decide it under the fail-closed policy.
func unavailable(res slidelimit.Result) error {
	delay := retryDelay(res)
	st := status.New(codes.Unavailable,
		fmt.Sprintf("grpclimit: rate limiter unavailable, retry in %v", delay))
	return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	if d, err := st.WithDetails(details...); err == nil {
		return d.Err()
	}
	return st.Err() // only a message that cannot be marshalled fails
}
