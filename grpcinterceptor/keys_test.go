package grpclimit_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	call := grpclimit.Call{FullMethod: "/pkg.Svc/Get", ClientIP: netip.MustParseAddr("203.0.113.9")}
	v6 := grpclimit.Call{FullMethod: "/pkg.Svc/Get", ClientIP: netip.MustParseAddr("2001:db8::1")}
	noIP := grpclimit.Call{FullMethod: "/pkg.Svc/Get"}
	withMD := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	userFrom := func(ctx context.Context) string {
		u, _ := ctx.Value(userKey{}).(string)
		return u
	}
	failing := func(context.Context, grpclimit.Call) (string, error) { return "", errors.New("boom") }
	tests := []struct {
		name     string
		key      grpclimit.KeyFunc
		ctx      context.Context
		call     grpclimit.Call
		want     string
		wantCode codes.Code // of the error; OK for none
	}{
		{"IP v4", grpclimit.KeyByIP, context.Background(), call, "ip:203.0.113.9", codes.OK},
		{"IP v6 /64", grpclimit.KeyByIP, context.Background(), v6, "ip:2001:db8::/64", codes.OK},
		{"IP v6 /128", grpclimit.KeyByIPPrefix(128), context.Background(), v6, "ip:2001:db8::1/128", codes.OK},
		{"IP missing", grpclimit.KeyByIP, context.Background(), noIP, "", codes.Internal},
		{"metadata", grpclimit.KeyByMetadata("X-Api-Key"), withMD("x-api-key", "k1"), call, slidelimit.HeaderIdentity("x-api-key", "k1"), codes.OK},
		{"metadata first non-empty", grpclimit.KeyByMetadata("x-api-key"), withMD("x-api-key", "", "x-api-key", "k2"), call, slidelimit.HeaderIdentity("x-api-key", "k2"), codes.OK},
		{"metadata missing", grpclimit.KeyByMetadata("x-api-key"), withMD("other", "v"), call, "", codes.Unauthenticated},
		{"metadata no context", grpclimit.KeyByMetadata("x-api-key"), context.Background(), call, "", codes.Unauthenticated},
		{"method", grpclimit.KeyByMethod, context.Background(), call, "route:/pkg.Svc/Get", codes.OK},
		{"user", grpclimit.KeyByUser(userFrom), context.WithValue(context.Background(), userKey{}, "ann"), call, "user:ann", codes.OK},
		{"user missing", grpclimit.KeyByUser(userFrom), context.Background(), call, "", codes.Unauthenticated},
		{"user nil func", grpclimit.KeyByUser(nil), context.Background(), call, "", codes.Unauthenticated},
		{"join", grpclimit.JoinKeys(grpclimit.KeyByMethod, grpclimit.KeyByIP), context.Background(), call,
			slidelimit.JoinIdentities("route:/pkg.Svc/Get", "ip:203.0.113.9"), codes.OK},
		{"join fails", grpclimit.JoinKeys(grpclimit.KeyByMethod, grpclimit.KeyByIP), context.Background(), noIP, "", codes.Internal},
		{"first of, first found", grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP), withMD("x-api-key", "k1"), call, slidelimit.HeaderIdentity("x-api-key", "k1"), codes.OK},
		{"first of, fallback", grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP), context.Background(), call, "ip:203.0.113.9", codes.OK},
		{"first of, none found", grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP), context.Background(), noIP, "", codes.Internal},
		{"first of, empty", grpclimit.FirstKey(), context.Background(), call, "", codes.Unauthenticated},
		{"first of, other error stops", grpclimit.FirstKey(failing, grpclimit.KeyByIP), context.Background(), call, "", codes.Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.key(tc.ctx, tc.call)
			if got != tc.want || status.Code(err) != tc.wantCode {
				t.Errorf("key(%v) = %q, %v, want %q, %v", tc.call, got, err, tc.want, tc.wantCode)
			}
			if tc.wantCode == codes.Internal || tc.wantCode == codes.Unauthenticated {
				if !errors.Is(err, grpclimit.ErrNoIdentity) {
					t.Errorf("key(%v) error %v does not wrap ErrNoIdentity", tc.call, err)
				}
			}
		})
	}
}

type userKey struct{}
