package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// faultProxy is a toxiproxy proxy between a limiter and Redis, run by
// toxiproxy's own server code inside the test binary: the limiter connects
// to Addr, the proxy forwards to the upstream Redis, and toxics added to it
// delay, drop or reset that traffic.
type faultProxy struct {
	t     testing.TB
	proxy *toxiproxy.Proxy
	// Addr is the proxy's listening address, on loopback.
	Addr string
}

// startFaultProxy starts a toxiproxy server with one proxy to upstream on a
// free loopback port. It is stopped, with its connections, when the test
// ends.
func startFaultProxy(t testing.TB, upstream string) *faultProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := srv.Collection.Add(p, true); err != nil {
		t.Fatalf("toxiproxy: start proxy to %s: %v", upstream, err)
	}
	t.Cleanup(func() { _ = srv.Collection.Clear() })
	return &faultProxy{t: t, proxy: p, Addr: p.Listen}
}

// addToxic adds a toxic of the given type ("latency", "reset_peer",
// "timeout", ...) on the given stream ("upstream": limiter to Redis,
// "downstream": Redis to limiter), with toxiproxy's JSON attributes.
func (f *faultProxy) addToxic(name, typ, stream string, attrs map[string]any) {
	f.t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		f.t.Fatalf("toxiproxy: encode toxic %s: %v", name, err)
	}
	if _, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
		f.t.Fatalf("toxiproxy: add toxic %s: %v", body, err)
	}
}

// removeToxic removes the named toxic; traffic flows normally again.
func (f *faultProxy) removeToxic(name string) {
	f.t.Helper()
	if err := f.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		f.t.Fatalf("toxiproxy: remove toxic %s: %v", name, err)
	}
}

// disable stops the proxy: its connections are closed and new ones are
// refused, as if Redis's host went away.
func (f *faultProxy) disable() { f.proxy.Stop() }

// enable starts the proxy again on the same address.
func (f *faultProxy) enable() {
	f.t.Helper()
	if err := f.proxy.Start(); err != nil {
		f.t.Fatalf("toxiproxy: enable proxy: %v", err)
	}
}
