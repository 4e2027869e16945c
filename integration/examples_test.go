package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// httpExamples are the HTTP examples a user starts, each limiting GET /ping
// to 5 requests per 10 seconds per client IP.
var httpExamples = []string{"gin", "echo", "fiber", "nethttp"}

// buildExamples builds the HTTP examples' commands, as a user does, into a
// folder of the test's own and returns their paths by name.
func buildExamples(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range httpExamples {
		args = append(args, "./"+name)
		bins[name] = filepath.Join(dir, name)
	}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = filepath.Join("..", "examples")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bins
}

var listening = regexp.MustCompile(`listening on (\S+)`)

// startExample starts the command bin with env added to the environment,
// on a free loopback port, and returns its address once it listens. It
// is stopped with SIGTERM, as a user stops it, when the test ends.
func startExample(t *testing.T, bin string, env ...string) string {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{"ADDR=127.0.0.1:0", "REDIS_CLUSTER_ADDRS=", "CLIENT_IP_HEADER="}, env...)...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGTERM", filepath.Base(bin))
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not say where it listens within 30s", filepath.Base(bin))
		return ""
	}
}

// xffProxy starts a reverse proxy on loopback that sends /<name>/... to
// the backend of that name, from the source address from, and sets only
// X-Forwarded-For: it appends the address its client came from, and
// passes every other header on as the client sent it.
func xffProxy(t *testing.T, from net.IP, backends map[string]string) string {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			name, rest, _ := strings.Cut(strings.TrimPrefix(r.In.URL.Path, "/"), "/")
			r.SetURL(&url.URL{Scheme: "http", Host: backends[name]})
			r.Out.URL.Path = "/" + rest
			r.Out.Header["X-Forwarded-For"] = r.In.Header["X-Forwarded-For"]
			r.SetXForwarded() // appends the client's address to X-Forwarded-For
			r.Out.Header.Del("X-Forwarded-Host")
			r.Out.Header.Del("X-Forwarded-Proto")
		},
		Transport: &http.Transport{DialContext: dialer.DialContext},
	}
	return serveHTTP(t, rp)
}

// TestExamplesBehindXFFProxy starts the Gin, Echo, Fiber and net/http
// examples as users start them, on one Redis, with TRUSTED_PROXIES naming
// a proxy that sets only X-Forwarded-For. Ten clients, each from an
// address of its own and forging X-Forwarded-For, X-Real-IP and Forwarded
// fields, send 12 requests each spread over the four servers: each gets
// exactly 5, and Redis holds no key for the proxy itself.
func TestExamplesBehindXFFProxy(t *testing.T) {
	long(t)
	rdb := redistest.Client(t)
	bins := buildExamples(t)
	// A loopback /24 of this run's own, so that no other run's keys count.
	net24 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(150), rand.IntN(256))
	proxyIP := net24 + "2"
	backends := map[string]string{}
	for _, name := range httpExamples {
		backends[name] = startExample(t, bins[name], "REDIS_URL=redis://"+rdb.Options().Addr+"/0", "TRUSTED_PROXIES="+proxyIP)
	}
	proxy := xffProxy(t, net.ParseIP(proxyIP), backends)
	busyLoops(t, 2, 30*time.Second)

	got := map[string]int{}
	for i := range 12 * 10 {
		client := fmt.Sprintf("%s%d", net24, 11+i%10)
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(client)}}
		hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
		name := httpExamples[(i/10)%len(httpExamples)]
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, proxy+"/"+name+"/ping", nil)
		if err != nil {
			t.Fatal(err)
		}
		forged := fmt.Sprintf("192.0.2.%d", i%250+1)
		req.Header.Set("X-Forwarded-For", forged)
		req.Header.Set("X-Real-Ip", forged)
		req.Header.Set("Forwarded", "for="+forged)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET /%s/ping from %s: %v", name, client, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		ok, err := admitted(resp.StatusCode)
		if err != nil {
			t.Fatalf("GET /%s/ping from %s: %v", name, client, err)
		}
		if ok {
			got[client]++
		}
	}
	t.Logf("XFF-only proxy, gin, echo, fiber and nethttp examples, 12 requests per client, limit 5: admitted %v", got)
	for i := range 10 {
		if client := fmt.Sprintf("%s%d", net24, 11+i); got[client] != 5 {
			t.Errorf("client %s: admitted %d in total, want exactly 5", client, got[client])
		}
	}
	keys, err := rdb.Keys(context.WithoutCancel(t.Context()), "*ip:"+proxyIP+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("Redis holds keys for the proxy itself: %v, want none", keys)
	}
}
