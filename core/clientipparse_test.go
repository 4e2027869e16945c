package slidelimit_test

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

func TestParseClientIP(t *testing.T) {
	tests := []struct {
		proxies, header string
		want            slidelimit.ClientIP
		err             error
	}{
		{"", "", slidelimit.ClientIP{Header: slidelimit.HeaderXForwardedFor}, nil},
		{"10.0.0.0/8, 192.0.2.7", "", slidelimit.ClientIP{
			TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")},
			Header:         slidelimit.HeaderXForwardedFor}, nil},
		{"10.0.0.1", " forwarded ", slidelimit.ClientIP{
			TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.1/32")}, Header: slidelimit.HeaderForwarded}, nil},
		{"", "X-REAL-IP", slidelimit.ClientIP{Header: slidelimit.HeaderXRealIP}, nil},
		{"", "X-Forwarded_For", slidelimit.ClientIP{}, slidelimit.ErrInvalidOption},
		{"10.0.0.300", "", slidelimit.ClientIP{}, slidelimit.ErrInvalidOption},
	}
	for _, tt := range tests {
		got, err := slidelimit.ParseClientIP(tt.proxies, tt.header)
		if !reflect.DeepEqual(got, tt.want) || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("ParseClientIP(%q, %q) = %+v, %v; want %+v, %v", tt.proxies, tt.header, got, err, tt.want, tt.err)
		}
	}
}
