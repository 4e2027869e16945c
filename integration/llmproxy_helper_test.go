package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// buildLLMProxy builds the llmproxy example's proxy and upstream, as a user
// does, into a folder of the test's own and returns their paths by name.
func buildLLMProxy(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator), "./llmproxy/proxy", "./llmproxy/upstream"}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = filepath.Join("..", "examples")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return map[string]string{"proxy": filepath.Join(dir, "proxy"), "upstream": filepath.Join(dir, "upstream")}
}

// llmProcess is a running proxy or upstream.
type llmProcess struct {
	cmd  *exec.Cmd
	addr string
	logs *lockedBuffer
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var llmListening = regexp.MustCompile(`listening on (\S+)`)

// startLLMProcess starts bin with env added to the environment and returns
// it once it says where it listens. It is stopped with SIGTERM when the
// test ends, unless the test killed it, and its log is shown if the test
// failed.
func startLLMProcess(t *testing.T, bin string, env ...string) *llmProcess {
	t.Helper()
	p := &llmProcess{cmd: exec.Command(bin), logs: &lockedBuffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	name := filepath.Base(bin)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-done
				t.Errorf("%s %s did not stop on SIGTERM", name, p.addr)
			}
		}
		if t.Failed() {
			t.Logf("%s %s logged:\n%s", name, p.addr, tail([]byte(p.logs.String()), 40))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := llmListening.FindStringSubmatch(p.logs.String()); m != nil {
			p.addr = m[1]
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not say where it listens within 30s:\n%s", name, p.logs.String())
	return nil
}

// llmRecord is one request as the upstream recorded it (GET /requests).
type llmRecord struct {
	Key      string `json:"key"`
	ID       string `json:"id"`
	Arrived  int64  `json:"arrived"`
	Ended    int64  `json:"ended"`
	InFlight int    `json:"in_flight"`
	Total    int    `json:"total_tokens"`
	Aborted  bool   `json:"aborted"`
}

// requests returns every request the upstream p recorded, in the order
// they arrived.
func (p *llmProcess) requests(t *testing.T) []llmRecord {
	t.Helper()
	var recs []llmRecord
	p.get(t, "/requests", &recs)
	return recs
}

// inFlight returns the requests of key the upstream p is answering now.
func (p *llmProcess) inFlight(t *testing.T, key string) int {
	t.Helper()
	var s struct {
		Keys map[string]struct {
			InFlight int `json:"in_flight"`
		} `json:"keys"`
	}
	p.get(t, "/stats", &s)
	return s.Keys[key].InFlight
}

func (p *llmProcess) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// llmKey is an API key of the fleet and how its clients ask.
type llmKey struct {
	name      string
	maxTokens [2]int // the range of max_tokens its requests ask for
	// longWords gives its requests one fixed prompt of 4-byte words, which
	// the upstream counts as fewer tokens than the proxy's estimate; other
	// keys' prompts are random words of 1 to 8 bytes, which may count more.
	longWords bool
	// pinned sends its requests to the fleet's victim replica only, until
	// the victim is dead, then (once resume is closed) to the others.
	pinned bool
}

// llmFleet is the clients' view of the replicas.
type llmFleet struct {
	replicas []*llmProcess // the victim last
	victim   *llmProcess
	dead     atomic.Bool   // the victim was killed
	resume   chan struct{} // closed when pinned clients may go on
	seq      atomic.Int64

	mu   sync.Mutex
	outs []llmOutcome
}

// llmOutcome is one request as its client saw it.
type llmOutcome struct {
	key      string
	replica  *llmProcess
	end      time.Time
	status   int
	err      string
	policy   string // what denied it: "requests" or "tokens" (OpenAI's error type)
	limited  bool   // the answer carried x-ratelimit- header fields
	estimate int    // the tokens the proxy reserved for it
	total    int    // the tokens it used, from its usage
}

var llmTransport = &http.Transport{MaxIdleConnsPerHost: 64}

// client sends k's requests, one at a time, until ctx ends, and records
// them. It waits 100 to 300 ms after a denial.
func (f *llmFleet) client(ctx context.Context, k llmKey, c int) {
	hc := &http.Client{Transport: llmTransport, Timeout: 30 * time.Second}
	rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
	for i := 0; ctx.Err() == nil; i++ {
		alive := f.replicas
		if f.dead.Load() {
			alive = f.replicas[:len(f.replicas)-1]
		}
		rep := alive[(c+i)%len(alive)]
		if k.pinned {
			rep = f.victim
			if f.dead.Load() {
				select {
				case <-f.resume:
				case <-ctx.Done():
					return
				}
				rep = alive[(c+i)%len(alive)]
			}
		}
		o := f.send(ctx, hc, rep, k, rng)
		if ctx.Err() != nil {
			return // cut by the end of the run
		}
		f.mu.Lock()
		f.outs = append(f.outs, o)
		f.mu.Unlock()
		if o.status == http.StatusTooManyRequests {
			select {
			case <-time.After(100*time.Millisecond + rand.N(200*time.Millisecond)):
			case <-ctx.Done():
			}
		}
	}
}

// send sends one chat completion of k through rep.
func (f *llmFleet) send(ctx context.Context, hc *http.Client, rep *llmProcess, k llmKey, rng *rand.Rand) llmOutcome {
	o := llmOutcome{key: k.name, replica: rep}
	user := "abcd efgh ijkl mnop qrst uvwx"
	if !k.longWords {
		words := make([]string, 5+rng.IntN(60))
		for i := range words {
			words[i] = strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(8))
		}
		user = strings.Join(words, " ")
	}
	system := "You are terse."
	maxTokens := k.maxTokens[0] + rng.IntN(k.maxTokens[1]-k.maxTokens[0]+1)
	stream := rng.IntN(3) == 0
	messages := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}}
	// The proxy's estimate (llmlimit.Estimate): one token per 4 bytes of
	// the messages' JSON, and max_tokens.
	raw, _ := json.Marshal(messages)
	o.estimate = (len(raw)+3)/4 + maxTokens
	req := map[string]any{"model": "fake", "messages": messages, "max_tokens": maxTokens, "stream": stream}
	if stream {
		req["stream_options"] = map[string]bool{"include_usage": true} // to read the usage the proxy settles
	}
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rep.addr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		panic(err) // not reached: the URL is the test's own
	}
	hreq.Header.Set("Authorization", "Bearer "+k.name)
	hreq.Header.Set("X-Request-Id", fmt.Sprintf("%s-%d", k.name, f.seq.Add(1)))
	resp, err := hc.Do(hreq)
	if err != nil {
		o.end, o.err = time.Now(), err.Error()
		return o
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	o.end, o.status, o.limited = time.Now(), resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit-Tokens") != ""
	if err != nil {
		o.err = err.Error()
		return o
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		var p struct{ Error struct{ Type string } }
		_ = json.Unmarshal(b, &p)
		o.policy = p.Error.Type
	case http.StatusOK:
		total, ok := lastUsage(b)
		if !ok {
			o.err = fmt.Sprintf("no usage in the answer %.200q", b)
		}
		o.total = total
	}
	return o
}

// lastUsage returns the total_tokens of the usage of a chat completion, or
// of the last event of a stream that carries one.
func lastUsage(b []byte) (int, bool) {
	var usage struct {
		Usage *struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &usage) == nil && usage.Usage != nil {
		return usage.Usage.Total, true
	}
	total, ok := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		if d, found := strings.CutPrefix(line, "data: "); found && json.Unmarshal([]byte(d), &usage) == nil && usage.Usage != nil {
			total, ok = usage.Usage.Total, true
		}
	}
	return total, ok
}

func (f *llmFleet) outcomes() []llmOutcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]llmOutcome(nil), f.outs...)
}

// llmPeek reads a key's counts in Redis as the proxies keep them, with a
// limiter of the same limits, and counts its own script calls.
type llmPeek struct {
	lim   *slidelimit.Limiter
	calls atomic.Int64
}

func newLLMPeek(t *testing.T, addr string) *llmPeek {
	t.Helper()
	p := &llmPeek{}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(scriptCounter{&p.calls})
	var err error
	// The key's limits as llmlimit counts them (tokens at a thousandth of
	// their window), so as to read their logs: a caller of one level, its
	// key, is the tenant "key:" and the key.
	p.lim, err = slidelimit.New(rdb, slidelimit.Per(llmTPM, llmWindow).Stepped(llmWindow/1000).Named("key-tokens"),
		slidelimit.WithLimits(slidelimit.Per(llmRPM, llmWindow).ForRequests().Named("key-requests"), slidelimit.InFlight(llmInFlight, llmLease).Named("key-in-flight")),
		slidelimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// usage returns the tokens and requests key's windows hold now.
func (p *llmPeek) usage(t *testing.T, key string) (tokens, requests int) {
	t.Helper()
	res, err := p.lim.Peek(t.Context(), "key:"+key)
	if err != nil {
		t.Fatalf("Peek(%s): %v", key, err)
	}
	for _, s := range res.Statuses {
		switch s.Limit.Name {
		case "key-tokens":
			tokens = llmTPM - s.Remaining
		case "key-requests":
			requests = llmRPM - s.Remaining
		}
	}
	return tokens, requests
}

// scriptCounter is a go-redis hook that counts the script calls a client
// sends.
type scriptCounter struct{ n *atomic.Int64 }

func (h scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h scriptCounter) count(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		h.n.Add(1)
	}
}
