package redistest

import (
	"fmt"
	"net/netip"
	"testing"
)

// ClientIPLimit is the quota every ClientIPScenario is written for: an
// adapter under test limits by a limit of this many requests per window,
// long enough for all of a scenario's requests to fall in one window.
const ClientIPLimit = 5

// ClientIPScenario is one way clients reach a server through proxies, the
// same for every adapter, so that each proves it resolves client IPs as
// slidelimit.ClientIP does against real Redis. The adapter under test
// limits by ClientIPLimit, keys requests by its client-IP key configured
// with TrustedProxies and Header, sends every request from a loopback peer
// (127.0.0.1 or ::1) with the request's header fields, and counts the
// admitted requests of each Request.Client; Check compares the counts.
type ClientIPScenario struct {
	// Name says what the scenario proves.
	Name string
	// TrustedProxies are the trusted proxies, the loopback peer among them
	// unless the scenario is about an untrusted peer.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header to read, "" for the default.
	Header string
	// Requests are sent in order.
	Requests []ClientIPRequest
	// Want is how many requests of each client must be admitted.
	Want map[string]int
}

// ClientIPRequest is one request of a ClientIPScenario.
type ClientIPRequest struct {
	// Header holds the request's header fields (or gRPC metadata) as name,
	// value pairs, several lines of one name in the order given.
	Header [][2]string
	// Client is who really sends the request, for counting.
	Client string
}

// Check fails t unless admitted, the number of admitted requests by
// client, is s.Want.
func (s ClientIPScenario) Check(t testing.TB, admitted map[string]int) {
	t.Helper()
	for client, want := range s.Want {
		if admitted[client] != want {
			t.Errorf("%s: %s got %d admitted, want %d (all: %v)", s.Name, client, admitted[client], want, admitted)
		}
	}
	for client, n := range admitted {
		if _, ok := s.Want[client]; !ok {
			t.Errorf("%s: unexpected client %s with %d admitted", s.Name, client, n)
		}
	}
}

// ClientIPScenarios returns the scenarios every adapter runs; package
// adaptertest runs them against each adapter.
func ClientIPScenarios() []ClientIPScenario {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8")}
	// oneClient is a scenario of 4*ClientIPLimit requests of client, the
	// i-th with the header fields of fields(i), of which ClientIPLimit
	// must be admitted.
	oneClient := func(name string, trusted []netip.Prefix, header, client string, fields func(i int) [][2]string) ClientIPScenario {
		sc := ClientIPScenario{Name: name, TrustedProxies: trusted, Header: header, Want: map[string]int{client: ClientIPLimit}}
		for i := range 4 * ClientIPLimit {
			sc.Requests = append(sc.Requests, ClientIPRequest{Client: client, Header: fields(i)})
		}
		return sc
	}
	forms := []string{"203.0.113.9", "::ffff:203.0.113.9", "[::ffff:203.0.113.9]:5555", "203.0.113.9:5555"}
	scenarios := []ClientIPScenario{
		// A client sends its own X-Forwarded-For line, a new address each
		// time; the proxy appends a second line with the address it saw.
		oneClient("two X-Forwarded-For lines, the client's first", loopback, "", "203.0.113.77", func(i int) [][2]string {
			return [][2]string{{"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1)}, {"X-Forwarded-For", "203.0.113.77"}}
		}),
		// RFC 7239: a forged element, then the proxy's, quoted IPv6 with a
		// port, and an inner proxy's trusted element.
		oneClient("Forwarded, forged element first", loopback, "Forwarded", "2001:db8:cafe::17", func(i int) [][2]string {
			return [][2]string{
				{"Forwarded", fmt.Sprintf("for=198.51.100.%d;proto=https", i+1)},
				{"Forwarded", fmt.Sprintf(`for="[2001:db8:cafe::17]:%d", for=10.0.0.2`, 4000+i)},
			}
		}),
		// One client whose address comes IPv4-mapped or not, with and
		// without a port, behind a trusted hop written IPv4-mapped.
		oneClient("IPv4-mapped X-Forwarded-For hops", loopback, "", "203.0.113.9", func(i int) [][2]string {
			return [][2]string{{"X-Forwarded-For", fmt.Sprintf("::ffff:198.51.100.%d, %s, ::ffff:10.0.0.2", i+1, forms[i%len(forms)])}}
		}),
		oneClient("IPv4-mapped X-Real-IP", loopback, "X-Real-IP", "198.51.100.9", func(i int) [][2]string {
			return [][2]string{{"X-Real-Ip", []string{"::ffff:198.51.100.9", "198.51.100.9"}[i%2]}}
		}),
		oneClient("IPv4-mapped Forwarded", loopback, "Forwarded", "198.51.100.9", func(i int) [][2]string {
			return [][2]string{{"Forwarded", []string{`for="[::ffff:198.51.100.9]"`, "for=198.51.100.9", `for="[::ffff:198.51.100.9]:80"`}[i%3]}}
		}),
	}

	// A proxy that sends only X-Forwarded-For in front of three clients,
	// who also send forged Forwarded and X-Real-IP fields, interleaved.
	clients := []string{"198.51.100.1", "198.51.100.2", "2001:db8:1:2::3"}
	mixed := ClientIPScenario{Name: "X-Forwarded-For-only proxy, several clients", TrustedProxies: loopback, Want: map[string]int{}}
	for i := range 3 * 4 * ClientIPLimit {
		c := clients[i%len(clients)]
		mixed.Want[c] = ClientIPLimit
		mixed.Requests = append(mixed.Requests, ClientIPRequest{Client: c, Header: [][2]string{
			{"X-Real-Ip", fmt.Sprintf("192.0.2.%d", i%250+1)},
			{"Forwarded", fmt.Sprintf("for=192.0.2.%d", i%250+1)},
			{"X-Forwarded-For", c},
		}})
	}
	scenarios = append(scenarios, mixed)

	// From an untrusted peer, no header mints an identity: whatever each
	// request forges, all of them share the peer's quota.
	for _, header := range []string{"", "Forwarded", "X-Real-IP"} {
		name := "untrusted peer, header " + map[string]string{"": "X-Forwarded-For"}[header] + header
		scenarios = append(scenarios, oneClient(name, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, header, "peer", func(i int) [][2]string {
			return [][2]string{
				{"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1)},
				{"Forwarded", fmt.Sprintf("for=198.51.100.%d", i+1)},
				{"X-Real-Ip", fmt.Sprintf("198.51.100.%d", i+1)},
			}
		}))
	}
	return scenarios
}
