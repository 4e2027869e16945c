package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
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
	// d is the flow's decision, for a refund.
	d adapter.Decision
}

// rpc is a call as the decision flow sees it.
type rpc struct {
	ctx  context.Context
	call Call
	out  *outcome // what the handler sent, for WithSettle; nil without it
}

// newFlow sets up c.flow, the decision flow every adapter of this project
// runs, over calls.
func (c *config) newFlow() {
	c.flow = adapter.Flow[rpc]{
		Name:     "grpclimit",
		Limiters: func(r rpc) *slidelimit.Limiter { return c.limiterFor(r.ctx, r.call) },
		Optional: true, // a method without a limiter is not limited
		Skip:     func(r rpc) bool { return c.skipped(r.ctx, r.call) },
		Key:      func(r rpc) (string, error) { return c.key(r.ctx, r.call) },
		Hook: func(ctx context.Context, r rpc, err error) {
			if keyStatus(err) != nil || ctx.Err() != nil && !errors.As(err, new(*adapter.KeyError)) {
				return // the caller's to fix, or gone
			}
			c.report(ctx, r.call.FullMethod, err)
		},
		RefundFailed: c.refundFail, RefundSuccessful: c.refundOK,
		Failed: func(code int) bool { return c.failed(codes.Code(code)) },
		Settle: c.settleFunc(),
	}
	if c.cost != nil {
		c.flow.Cost = func(r rpc) int { return c.cost(r.ctx, r.call) }
	}
	if c.limits != nil {
		c.flow.Limits = func(r rpc) []slidelimit.Limit { return c.limits(r.ctx, r.call) }
	}
	if c.tree != nil {
		c.flow.Tree = func(r rpc) (string, []slidelimit.Level, error) { return c.tree(r.ctx, r.call) }
	}
}

// newCall describes the call to key functions and selectors.
func (c *config) newCall(ctx context.Context, fullMethod string) rpc {
	r := rpc{ctx: ctx, call: Call{FullMethod: fullMethod, ClientIP: c.clientIP(ctx)}}
	if c.settle != nil {
		r.out = &outcome{}
	}
	return r
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

// identify returns the identity key gives r, or the status to refuse the
// call with, reporting what is the server's to fix.
func (c *config) identify(r rpc, key KeyFunc) (string, error) {
	f := c.flow
	f.Key = func(r rpc) (string, error) { return key(r.ctx, r.call) }
	id, err := f.Identify(r)
	if err != nil {
		f.Hook(r.ctx, r, err)
		return "", c.refusal(r.ctx, adapter.Decision{Verdict: adapter.Fail, Err: err})
	}
	return id, nil
}

// keyStatus returns the status of a call whose key function failed with
// err, a *adapter.KeyError, when the failure is the caller's (a status
// other than codes.Internal or codes.Unknown); nil for any other error.
func keyStatus(err error) *status.Status {
	var ke *adapter.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	var st *status.Status
	if s, ok := status.FromError(ke.Err); ok {
		st = s
	} else if errors.Is(ke.Err, ErrNoIdentity) {
		st = status.New(codes.Unauthenticated, ke.Err.Error())
	}
	if st == nil || st.Code() == codes.Internal || st.Code() == codes.Unknown {
		return nil
	}
	return st
}

// verdictOf returns what to do with the call the flow decided d. With
// headers, an allowed call's verdict carries its rate-limit fields for the
// response headers.
func (c *config) verdictOf(ctx context.Context, d adapter.Decision, headers bool) verdict {
	switch d.Verdict {
	case adapter.Pass:
		return verdict{}
	case adapter.Admit:
		if !headers || c.noHeaders {
			return verdict{d: d}
		}
		return verdict{md: c.fields(d.Result), d: d} // none for a fallback
	case adapter.Deny:
		return verdict{err: exhausted(d.Result), md: c.trailer(d.Result)}
	}
	if errors.Is(d.Err, slidelimit.ErrUnavailable) && ctx.Err() == nil {
		return verdict{err: unavailable(d.Result), md: c.trailer(d.Result)}
	}
	return verdict{err: c.refusal(ctx, d)}
}

// refusal returns the status of a call the flow failed for another reason
// than a Redis failure under fail-closed.
func (c *config) refusal(ctx context.Context, d adapter.Decision) error {
	if st := keyStatus(d.Err); st != nil {
		return st.Err()
	}
	var ke *adapter.KeyError
	switch {
	case errors.As(d.Err, &ke):
		return status.Error(codes.Internal, "grpclimit: cannot identify the caller")
	case ctx.Err() != nil:
		// The caller is gone or out of time.
		return status.FromContextError(ctx.Err()).Err()
	}
	// An empty identity from a custom KeyFunc, or a cost out of range: a
	// server fault.
	return status.Error(codes.Internal, "grpclimit: cannot limit the call")
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
