package slidelimit

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// ownClient returns a client of its own on the test server, so that its
// limiters' connections are the test's alone.
func ownClient(t *testing.T, opt redis.Options) *redis.Client {
	t.Helper()
	if opt.Addr == "" {
		opt.Addr = redistest.Client(t).Options().Addr
	}
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// wireConns returns the limiter connections of client open on Redis, by
// the client name they carry.
func wireConns(t *testing.T, admin *redis.Client, name string) []string {
	t.Helper()
	list, err := admin.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// TestWireUsesTheClientsOptions runs a limiter whose client logs in as an
// ACL user, selects a database and names its connections: the limiter's
// own connections do all three, and its keys land in that database.
func TestWireUsesTheClientsOptions(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := ownClient(t, redis.Options{Addr: srv.Addr})
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "limiter", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := ownClient(t, redis.Options{Addr: srv.Addr, Username: "limiter", Password: "s3cret", DB: 3, ClientName: "wire-options"})
	lim, err := New(rdb, PerMinute(2), WithPrefix("opt:"))
	if err != nil {
		t.Fatal(err)
	}
	if lim.wire == nil {
		t.Fatal("the limiter sends through go-redis, want connections of its own")
	}
	for i := range 3 {
		res, err := lim.Allow(t.Context(), "alice")
		if err != nil || res.Fallback || res.Allowed != (i < 2) {
			t.Fatalf("call %d: Allow = %+v, %v; want a decision of Redis", i+1, res, err)
		}
	}
	logged := ownClient(t, redis.Options{Addr: srv.Addr, Username: "limiter", Password: "s3cret", DB: 3})
	key, _ := Key("opt:", "alice", PerMinute(2))
	if n, err := logged.ZCard(t.Context(), key).Result(); err != nil || n != 2 {
		t.Errorf("ZCARD %s in database 3 = %d, %v; want 2", key, n, err)
	}
	if ids := wireConns(t, logged, "wire-options"); len(ids) == 0 {
		t.Error("no connection on Redis carries the client's name")
	}

	wrong := ownClient(t, redis.Options{Addr: srv.Addr, Username: "limiter", Password: "wrong"})
	lim2, _ := New(wrong, PerMinute(2), WithFailurePolicy(FailClosed))
	if res, err := lim2.Allow(t.Context(), "alice"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGPASS") || res.Allowed {
		t.Errorf("Allow with a wrong password = %+v, %v; want a fail-closed fallback naming WRONGPASS", res, err)
	}
}

// TestWireRedialsAStaleConnection kills the limiter's connections on the
// Redis side between calls, as a Redis timeout or a proxy would: the next
// call is sent again on a fresh connection and decided by Redis.
func TestWireRedialsAStaleConnection(t *testing.T) {
	admin := redistest.Client(t)
	rdb := ownClient(t, redis.Options{Addr: admin.Options().Addr, ClientName: "wire-stale"})
	lim, _ := New(rdb, PerMinute(100), WithPrefix(redistest.Prefix(t)))
	for i := range 5 {
		res, err := lim.Allow(t.Context(), "stale")
		if err != nil || res.Fallback || !res.Allowed || res.Remaining != 99-i {
			t.Fatalf("call %d: Allow = %+v, %v; want admitted by Redis with %d left", i+1, res, err, 99-i)
		}
		ids := wireConns(t, admin, "wire-stale")
		if len(ids) == 0 {
			t.Fatal("no limiter connection to kill")
		}
		for _, id := range ids {
			if err := admin.Do(t.Context(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestWireCallersLeaveMidFlight pauses Redis while 60 callers wait for
// their replies, and lets a third of them leave: the others each get their
// own reply, in order, once Redis answers, and the connections stay in
// step for the calls after.
func TestWireCallersLeaveMidFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := ownClient(t, redis.Options{Addr: srv.Addr})
	admin := ownClient(t, redis.Options{Addr: srv.Addr})
	lim, _ := New(rdb, PerMinute(1000), WithTimeout(10*time.Second), WithDenyCache(0))
	if _, err := lim.Peek(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	pause(t, admin, 400*time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			if i%3 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			// Cost i+1 leaves 999-i: each caller can tell its own reply.
			res, err := lim.AllowN(ctx, fmt.Sprintf("caller-%d", i), i+1)
			switch {
			case i%3 == 0:
				if !errors.Is(err, context.DeadlineExceeded) {
					errs <- fmt.Errorf("caller %d left at its deadline but got %+v, %w", i, res, err)
				}
			case err != nil || !res.Allowed || res.Remaining != 999-i:
				errs <- fmt.Errorf("caller %d: AllowN = %+v, %w; want admitted with %d left", i, res, err, 999-i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range 60 {
		res, err := lim.AllowN(t.Context(), fmt.Sprintf("caller-%d", i), 1)
		// A caller that left was recorded all the same if Redis ran its
		// script once the pause ended; either way the reply is its own.
		recorded := res.Remaining == 998-i
		unrecorded := i%3 == 0 && res.Remaining == 999
		if err != nil || !recorded && !unrecorded {
			t.Errorf("after the pause, caller-%d: AllowN(1) = %+v, %v; want %d left", i, res, err, 998-i)
		}
	}
}

// pause stops Redis answering any client for d (CLIENT PAUSE; Redis 7.0
// pauses a CLIENT UNPAUSE too).
func pause(t *testing.T, admin *redis.Client, d time.Duration) {
	t.Helper()
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestWireLoneCallerLeaves sends a lone call to a Redis that does not
// answer (CLIENT PAUSE) and ends its caller's context: the caller leaves at once, its connection
// stays with a goroutine reading for it, and a call sent behind it with a
// shorter timeout fails at its own deadline, as a failed Redis.
func TestWireLoneCallerLeaves(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := ownClient(t, redis.Options{Addr: srv.Addr})
	long, _ := New(rdb, PerMinute(5), WithTimeout(time.Minute), WithBreaker(0, 0))
	short, _ := New(rdb, PerMinute(5), WithTimeout(200*time.Millisecond), WithBreaker(0, 0), WithFailurePolicy(FailClosed))
	if _, err := long.Peek(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	pause(t, ownClient(t, redis.Options{Addr: srv.Addr}), 1500*time.Millisecond)

	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := long.Allow(ctx, "k"); first <- err }()
	waitFor(t, "the lone call on a connection", func() bool { return long.wire.load() == 1 })
	second := make(chan error, 1)
	go func() { _, err := short.Allow(t.Context(), "k"); second <- err }()
	waitFor(t, "the second call behind it", func() bool { return long.wire.load() == 2 })

	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the lone caller whose context ended got %v, want context.Canceled", err)
	}
	select {
	case err := <-second:
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errNoAnswer) {
			t.Errorf("the call behind the silent one got %v, want no answer in time", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call behind the left one was not decided within 30 s: it waits on the left call's minute")
	}
	waitFor(t, "the connection to be abandoned", func() bool { return long.wire.load() == 0 })
}

// load returns how many calls are out on w's connections.
func (w *wire) load() int {
	w.nodes.mu.Lock()
	defer w.nodes.mu.Unlock()
	n := 0
	for _, node := range w.nodes.nodes {
		node.mu.Lock()
		for _, cn := range node.conns {
			n += int(cn.load.Load())
		}
		node.mu.Unlock()
	}
	return n
}

// TestWireQueueFull fills a node's connection: the next call is decided
// by the policy at once, wrapping ErrUnavailable, and tells the breaker
// nothing.
func TestWireQueueFull(t *testing.T) {
	defer func(n int32, c int) { maxConnLoad, maxConns = n, c }(maxConnLoad, maxConns)
	maxConnLoad, maxConns = 2, 1
	srv := redistest.StartServer(t)
	rdb := ownClient(t, redis.Options{Addr: srv.Addr})
	lim, _ := New(rdb, PerMinute(5), WithTimeout(time.Minute), WithFailurePolicy(FailClosed), WithBreaker(1, time.Minute))
	if _, err := lim.Peek(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	// Paused, Redis takes the calls and answers none.
	pause(t, ownClient(t, redis.Options{Addr: srv.Addr}), time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 2)
	for range 2 {
		go func() { _, err := lim.Allow(ctx, "q"); left <- err }()
	}
	waitFor(t, "the connection full", func() bool { return lim.wire.load() == 2 })
	res, err := lim.Allow(t.Context(), "q")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errQueueFull) || res.Allowed || !res.Fallback {
		t.Fatalf("Allow with every connection full = %+v, %v; want a fail-closed fallback wrapping ErrUnavailable", res, err)
	}
	if _, err := lim.brk.admit(lim.wire.opt.Addr); err != nil {
		t.Errorf("after a full queue the breaker = %v, want closed", err)
	}
	cancel()
	for range 2 {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled caller got %v, want context.Canceled", err)
		}
	}
}

// TestWireClosedClient closes the client under a limiter: its calls fail
// like the client's own commands, and its connections close.
func TestWireClosedClient(t *testing.T) {
	admin := redistest.Client(t)
	rdb := ownClient(t, redis.Options{Addr: admin.Options().Addr, ClientName: "wire-closed"})
	lim, _ := New(rdb, PerMinute(5), WithPrefix(redistest.Prefix(t)), WithFailurePolicy(FailClosed))
	if _, err := lim.Allow(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if len(wireConns(t, admin, "wire-closed")) == 0 {
		t.Fatal("no limiter connection open")
	}
	_ = rdb.Close()
	waitFor(t, "the limiter's connections to close", func() bool { return len(wireConns(t, admin, "wire-closed")) == 0 })
	res, err := lim.Allow(t.Context(), "c")
	if !errors.Is(err, redis.ErrClosed) || res.Allowed || !res.Fallback {
		t.Errorf("Allow on a closed client = %+v, %v; want a fail-closed fallback wrapping redis.ErrClosed", res, err)
	}
}

// TestWireAllocatesNothing pins the transport's cost: an admitted decision
// allocates its Result's block and nothing else.
func TestWireAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	rdb := ownClient(t, redis.Options{})
	lim, _ := New(rdb, PerMinute(MaxQuota), WithPrefix(redistest.Prefix(t)), WithTimeout(10*time.Second))
	ctx := t.Context()
	allocs := testing.AllocsPerRun(200, func() {
		if res, err := lim.Allow(ctx, "allocs"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	})
	// One decision block; a batch of request ids every 64 calls.
	if allocs > 1.1 {
		t.Errorf("an admitted decision allocates %.2f times, want 1 (its Result's block)", allocs)
	}
}

// TestWireSpeaksTLS runs a limiter on a client that reaches Redis over TLS
// only: the limiter's own connections go through the client's dialer, and
// so its TLS configuration.
func TestWireSpeaksTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	tlsPort := freeLoopbackPort(t)
	// The plain port stays for redistest's own readiness check.
	srv := redistest.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	host, _, _ := net.SplitHostPort(srv.Addr)
	rdb := ownClient(t, redis.Options{Addr: net.JoinHostPort(host, strconv.Itoa(tlsPort)),
		TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	lim, _ := New(rdb, PerMinute(2), WithFailurePolicy(FailClosed))
	if lim.wire == nil {
		t.Fatal("the limiter sends through go-redis, want connections of its own")
	}
	for i := range 3 {
		res, err := lim.Allow(t.Context(), "tls")
		if err != nil || res.Fallback || res.Allowed != (i < 2) {
			t.Fatalf("call %d over TLS: Allow = %+v, %v; want a decision of Redis", i+1, res, err)
		}
	}
	plain := ownClient(t, redis.Options{Addr: net.JoinHostPort(host, strconv.Itoa(tlsPort))})
	lim2, _ := New(plain, PerMinute(2), WithFailurePolicy(FailClosed), WithTimeout(time.Second))
	if res, err := lim2.Allow(t.Context(), "tls"); err == nil || !res.Fallback {
		t.Errorf("Allow in plain text on a TLS port = %+v, %v; want a failure", res, err)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir, and returns their paths and a pool trusting it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "slidelimit test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// freeLoopbackPort returns a loopback TCP port free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
