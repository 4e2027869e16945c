package adapter

import (
	"context"
	"reflect"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Options is the configuration of a middleware set by functional options,
// as httplimit's and ginlimit's are, over requests of type R; D and F are
// the adapter's deny and error handler types. An adapter declares an
// Option type of its own package whose underlying type is
// func(*Options[R, D, F]), builds its With… functions with a Set, and
// reads the result with NewOptions:
//
//	type config = adapter.Options[*gin.Context, DenyHandler, ErrorHandler]
//	type Option func(*config)
//	var set adapter.Set[Option, *gin.Context, DenyHandler, ErrorHandler]
//	func WithKey(f KeyFunc) Option { return set.Key(f) }
//
// The Option type is the adapter's own, not an alias of a generic type
// here, so that the adapter's documentation lists it with its With…
// functions.
type Options[R, D, F any] struct {
	// Limiters chooses the limiter of a request (Flow.Limiters).
	Limiters func(R) *slidelimit.Limiter
	// Key is the identity of a request (Flow.Key).
	Key func(R) (string, error)
	// Cost is the units a request takes (Flow.Cost).
	Cost func(R) int
	// Limits are the limits of a request instead of the limiter's own
	// (Flow.Limits).
	Limits func(R) []slidelimit.Limit
	// Tree is the tenant and the levels of a request's tree, decided in
	// place of Key and Limits (Flow.Tree).
	Tree func(R) (tenant string, levels []slidelimit.Level, err error)
	// Skip exempts requests (Flow.Skip).
	Skip func(R) bool
	// Deny answers a denied request.
	Deny D
	// Fail answers a request that failed (Verdict Fail).
	Fail F
	// Hook receives every error (Flow.Hook).
	Hook func(R, error)
	// Headers selects the rate-limit header fields.
	Headers slidelimit.Headers
	// RefundFailed and RefundSuccessful are Flow's.
	RefundFailed, RefundSuccessful bool
	// Failed is Flow.Failed.
	Failed func(status int) bool
	// Settle is Flow.Settle.
	Settle func(R, Response) (actual int, ok bool)
}

// NewOptions returns defaults with opts applied in order; nil options are
// skipped. O is the adapter's Option type.
func NewOptions[O ~func(*Options[R, D, F]), R, D, F any](defaults Options[R, D, F], opts []O) Options[R, D, F] {
	o := defaults
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Flow returns the decision flow of o for an adapter whose requests are
// its context, named name, with lim as its limiter.
func (o Options[R, D, F]) Flow(name string, lim *slidelimit.Limiter) Flow[R] {
	f := Flow[R]{
		Name: name, Limiter: lim, Limiters: o.Limiters, Skip: o.Skip, Key: o.Key, Cost: o.Cost, Limits: o.Limits, Tree: o.Tree,
		RefundFailed: o.RefundFailed, RefundSuccessful: o.RefundSuccessful, Failed: o.Failed, Settle: o.Settle,
	}
	if hook := o.Hook; hook != nil {
		f.Hook = func(_ context.Context, r R, err error) { hook(r, err) }
	}
	return f
}

// Set builds the options of Options[R, D, F], one method per option, as
// values of the adapter's Option type O, for its With… functions: func
// WithKey(f KeyFunc) Option { return set.Key(f) }. Each method sets one
// field, and those whose doc says so keep the default for a nil argument,
// so that every adapter treats a nil option the same way. Its zero value
// is ready to use.
type Set[O ~func(*Options[R, D, F]), R, D, F any] struct{}

// Key sets Options.Key; nil keeps the default.
func (Set[O, R, D, F]) Key(f func(R) (string, error)) O {
	return func(o *Options[R, D, F]) {
		if f != nil {
			o.Key = f
		}
	}
}

// Limiters sets Options.Limiters.
func (Set[O, R, D, F]) Limiters(f func(R) *slidelimit.Limiter) O {
	return func(o *Options[R, D, F]) { o.Limiters = f }
}

// Cost sets Options.Cost.
func (Set[O, R, D, F]) Cost(f func(R) int) O {
	return func(o *Options[R, D, F]) { o.Cost = f }
}

// Limits sets Options.Limits.
func (Set[O, R, D, F]) Limits(f func(R) []slidelimit.Limit) O {
	return func(o *Options[R, D, F]) { o.Limits = f }
}

// Tree sets Options.Tree; nil decides by Key and Limits, the default.
func (Set[O, R, D, F]) Tree(f func(R) (tenant string, levels []slidelimit.Level, err error)) O {
	return func(o *Options[R, D, F]) { o.Tree = f }
}

// Skip sets Options.Skip.
func (Set[O, R, D, F]) Skip(f func(R) bool) O {
	return func(o *Options[R, D, F]) { o.Skip = f }
}

// Deny sets Options.Deny; nil keeps the default.
func (Set[O, R, D, F]) Deny(h D) O {
	return func(o *Options[R, D, F]) {
		if !isNil(h) {
			o.Deny = h
		}
	}
}

// Fail sets Options.Fail; nil keeps the default.
func (Set[O, R, D, F]) Fail(h F) O {
	return func(o *Options[R, D, F]) {
		if !isNil(h) {
			o.Fail = h
		}
	}
}

// Hook sets Options.Hook; nil keeps the default.
func (Set[O, R, D, F]) Hook(f func(R, error)) O {
	return func(o *Options[R, D, F]) {
		if f != nil {
			o.Hook = f
		}
	}
}

// Headers sets Options.Headers.
func (Set[O, R, D, F]) Headers(h slidelimit.Headers) O {
	return func(o *Options[R, D, F]) { o.Headers = h }
}

// RefundFailed sets Options.RefundFailed.
func (Set[O, R, D, F]) RefundFailed() O {
	return func(o *Options[R, D, F]) { o.RefundFailed = true }
}

// RefundSuccessful sets Options.RefundSuccessful.
func (Set[O, R, D, F]) RefundSuccessful() O {
	return func(o *Options[R, D, F]) { o.RefundSuccessful = true }
}

// Failed sets Options.Failed; nil keeps the default.
func (Set[O, R, D, F]) Failed(f func(status int) bool) O {
	return func(o *Options[R, D, F]) {
		if f != nil {
			o.Failed = f
		}
	}
}

// Settle sets Options.Settle.
func (Set[O, R, D, F]) Settle(f func(R, Response) (actual int, ok bool)) O {
	return func(o *Options[R, D, F]) { o.Settle = f }
}

// isNil reports whether v is nil: a nil interface, or a nil func, map,
// pointer, slice or channel held in one.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Func, reflect.Map, reflect.Pointer, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// WithDefaults returns cfg, a Config struct of an adapter configured the
// way Echo's and Fiber's own middleware are, with every zero field set to
// the field of defaults: "a zero field takes its value from
// DefaultConfig".
func WithDefaults[T any](cfg, defaults T) T {
	v, d := reflect.ValueOf(&cfg).Elem(), reflect.ValueOf(defaults)
	if v.Kind() != reflect.Struct {
		return cfg
	}
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() {
			f.Set(d.Field(i))
		}
	}
	return cfg
}
