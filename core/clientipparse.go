package slidelimit

import (
	"fmt"
	"strings"
)

// ParseClientIP returns the ClientIP that trustedProxies and header
// describe, as a server reads them from its configuration or environment:
//
//	ip, err := slidelimit.ParseClientIP(os.Getenv("TRUSTED_PROXIES"), os.Getenv("CLIENT_IP_HEADER"))
//
// trustedProxies is a comma-separated list for ParseTrustedProxies; empty
// trusts no proxy. header names the forwarding header the proxies set:
// empty or "X-Forwarded-For" (the default), "Forwarded", or "X-Real-IP",
// in any case. Any other header, or a bad proxy, is an error wrapping
// ErrInvalidOption, so that a typo never leaves every client keyed by the
// proxy's address or lets clients pick their own.
func ParseClientIP(trustedProxies, header string) (ClientIP, error) {
	proxies, err := ParseTrustedProxies(strings.Split(trustedProxies, ",")...)
	if err != nil {
		return ClientIP{}, err
	}
	header = strings.TrimSpace(header)
	for _, known := range []string{HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP} {
		if header == "" || strings.EqualFold(header, known) {
			return ClientIP{TrustedProxies: proxies, Header: known}, nil
		}
	}
	return ClientIP{}, fmt.Errorf("%w: client IP header %q: want %s, %s or %s", ErrInvalidOption, header, HeaderXForwardedFor, HeaderForwarded, "X-Real-IP")
}
