package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Environment variables read by this package.
const (
	// EnvAddr holds the host:port of a standalone Redis, or its URL
	// (redis://user:password@host:port/db, rediss:// for TLS).
	EnvAddr = "SLIDELIMIT_REDIS_ADDR"
	// EnvClusterAddrs holds comma-separated host:port seeds of a Redis
	// Cluster, or a URL as go-redis's ParseClusterURL reads it
	// (redis://user:password@host:port?addr=host2:port2, rediss:// for TLS).
	EnvClusterAddrs = "SLIDELIMIT_REDIS_CLUSTER_ADDRS"
	// EnvRequire, when "1", turns every skip for want of Redis into a failure.
	EnvRequire = "SLIDELIMIT_REQUIRE_REDIS"
	// EnvServer names the redis-server binary; the default is found on PATH.
	EnvServer = "SLIDELIMIT_REDIS_SERVER"
)

// howTo says how to give the tests a Redis.
const howTo = "run `make test` from the repository root, which starts Redis for the tests; " +
	"or install redis-server (apt-get install redis-server redis-tools) so tests can start their own"

// Client returns a client of a standalone Redis: the harness's if
// SLIDELIMIT_REDIS_ADDR is set, and otherwise a private server started for
// this test. The client is closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = StartServer(t).Addr
	}
	opts := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			t.Fatalf("redistest: %s: %v", EnvAddr, err)
		}
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, opts.Addr)
	return rdb
}

// ClusterClient returns a client of the harness's Redis Cluster, named by
// SLIDELIMIT_REDIS_CLUSTER_ADDRS. Without it the test is skipped, or fails
// under SLIDELIMIT_REQUIRE_REDIS=1. The client is closed when the test ends.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	seeds := os.Getenv(EnvClusterAddrs)
	if seeds == "" {
		unavailable(t, "no Redis Cluster: "+EnvClusterAddrs+" is not set")
	}
	opts := &redis.ClusterOptions{Addrs: strings.Split(seeds, ",")}
	if strings.Contains(seeds, "://") {
		var err error
		if opts, err = redis.ParseClusterURL(seeds); err != nil {
			t.Fatalf("redistest: %s: %v", EnvClusterAddrs, err)
		}
	}
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ping(t, rdb, strings.Join(opts.Addrs, ","))
	return rdb
}

// Prefix returns a key prefix no other test or run shares, so that tests
// can run in parallel against one server. It names the test (its last 36
// bytes) and is at most 61 bytes, within slidelimit's limit of 64.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7F || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, t.Name())
	if len(name) > 36 { // keep the prefix within slidelimit's 64 bytes
		name = name[len(name)-36:]
	}
	return "test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// Server is a private redis-server process that a test can stop and start
// again on the same address, to test what happens while Redis is down.
type Server struct {
	// Addr is the server's host:port on the loopback interface.
	Addr string

	t      testing.TB
	bin    string
	args   []string
	mu     sync.Mutex
	proc   *os.Process   // nil while stopped
	exited chan struct{} // closed when proc has exited
	dir    string        // the running server's working directory, its own
	out    *bytes.Buffer
}

// StartServer starts a private redis-server on a free loopback port, with
// persistence off, and stops it when the test ends. Extra arguments are
// passed to redis-server after the defaults, as "--replicaof", "127.0.0.1",
// "6379" would be.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := serverBinary()
	if err != nil {
		unavailable(t, err.Error())
	}
	s, err := startFree(bin, args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.t = t
	t.Cleanup(s.Stop)
	return s
}

// Main runs a package's tests and examples with REDIS_ADDR naming a Redis:
// the harness's standalone server, or else a private one started for the
// run and stopped after it. Call it from TestMain, so that Example
// functions, which cannot ask for a testing.T, connect with
// redis.Options{Addr: os.Getenv("REDIS_ADDR")}:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
//
// Without a harness or a redis-server binary, REDIS_ADDR is left alone and
// the examples that need Redis fail; the tests skip or fail as usual.
func Main(m *testing.M) int {
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		if bin, err := serverBinary(); err == nil {
			s, err := startFree(bin)
			if err != nil {
				fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
				return 1
			}
			defer s.Stop()
			addr = s.Addr
		}
	}
	if addr != "" {
		_ = os.Setenv("REDIS_ADDR", addr)
	}
	return m.Run()
}

func serverBinary() (string, error) {
	if bin := os.Getenv(EnvServer); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server is not on PATH")
	}
	return bin, nil
}

// startFree starts a server on a free loopback port, trying a few ports in
// case another process takes one first.
func startFree(bin string, args ...string) (*Server, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, args: args}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("start redis-server: %w", lastErr)
}

// Stop kills the server at once, as a crash or a network cut would, and
// waits until it has exited. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
	s.proc, s.dir = nil, ""
}

// Restart starts a stopped server again on the same address, empty (in a
// new working directory, unless its arguments name one), and waits until
// it answers: up to 10 s, or up to a minute while it answers LOADING, for
// a server loading a large dataset on a busy host is alive, only slow.
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for range 50 { // the port may linger for a moment after a kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart redis-server on %s: %v", s.Addr, err)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.exited: // it ended on its own, by a SHUTDOWN
			_ = os.RemoveAll(s.dir)
			s.proc, s.dir = nil, ""
		default:
			return errors.New("already running")
		}
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	// A directory of its own for each start: a server that writes an RDB
	// anyway (a SHUTDOWN sent by redis-cli --cluster del-node, a SAVE)
	// must not hand its keys to the next server started, or to itself
	// restarted, which start empty.
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return fmt.Errorf("a directory for redis-server: %w", err)
	}
	args := []string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir}
	if len(s.args) > 0 && !strings.HasPrefix(s.args[0], "-") {
		// A configuration file must come first.
		args = slices.Concat(s.args[:1], args, s.args[1:])
	} else {
		args = append(args, s.args...)
	}
	cmd := exec.Command(s.bin, args...)
	s.out = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline, loadingDeadline := time.Now().Add(10*time.Second), time.Now().Add(time.Minute)
	for {
		select {
		case <-exited:
			_ = os.RemoveAll(dir)
			return fmt.Errorf("redis-server exited: %s", strings.TrimSpace(s.out.String()))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.proc, s.exited, s.dir = cmd.Process, exited, dir
			return nil
		}
		// A server still loading its data set gets until loadingDeadline.
		stillLoading := strings.HasPrefix(err.Error(), "LOADING") && time.Now().Before(loadingDeadline)
		if time.Now().After(deadline) && !stillLoading {
			_ = cmd.Process.Kill()
			<-exited
			_ = os.RemoveAll(dir)
			return fmt.Errorf("no answer on %s: %w", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors the primary at primaryAddr under the name master, with a quorum
// of one and short timeouts so that failovers finish in about a second. It
// is stopped when the test ends.
func StartSentinel(t testing.TB, master, primaryAddr string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(primaryAddr)
	if err != nil {
		t.Fatalf("redistest: primary address %q: %v", primaryAddr, err)
	}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\n"+
		"sentinel down-after-milliseconds %[1]s 500\n"+
		"sentinel failover-timeout %[1]s 2000\n", master, host, port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("redistest: write sentinel config: %v", err)
	}
	return StartServer(t, conf, "--sentinel")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func ping(t testing.TB, rdb redis.UniversalClient, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		unavailable(t, fmt.Sprintf("Redis at %s does not answer: %v", addr, err))
	}
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("redistest: %s; %s", why, howTo)
	}
	t.Skipf("redistest: %s; %s", why, howTo)
}
