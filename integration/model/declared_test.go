package model

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyWatch holds every command a script runs to the keys its call
// declared (the design card: "every key it touches is passed in KEYS", so
// that Redis Cluster runs it): it follows each node's MONITOR stream, in
// which Redis writes a script call and then, before any other client's
// command, each command the script ran ("[0 lua]"), and checks that each
// key such a command names is one of the call's KEYS. Only script calls
// that declare a key of the checker's ("model:…") are judged, so that a
// shared server's other tests pass unjudged.
//
// MONITOR connections are normal clients: CLIENT KILL and a restart end
// them, and the watch dials again at once; what a node ran meanwhile goes
// unwatched (counted in gaps).
type keyWatch struct {
	mu      sync.Mutex
	keySpec map[string]keySpec // by lower-case command name
	bad     []string           // violations not yet taken
	calls   int                // script calls judged
	cmds    int                // commands of theirs judged
	gaps    int                // times a node's stream was lost
	seen    map[string]bool    // sync tokens seen
	closed  bool
	conns   map[string]net.Conn
	wake    *sync.Cond
}

// keySpec is where a command's keys are among its arguments (COMMAND
// INFO): from first to last (negative: from the end) every step.
type keySpec struct{ first, last, step int }

// watchKeys starts a keyWatch on every node of e.
func (e *env) watchKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	infos, err := e.admins[0].Command(ctx).Result()
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	w := &keyWatch{keySpec: map[string]keySpec{}, seen: map[string]bool{}, conns: map[string]net.Conn{}}
	w.wake = sync.NewCond(&w.mu)
	for name, ci := range infos {
		w.keySpec[strings.ToLower(name)] = keySpec{int(ci.FirstKeyPos), int(ci.LastKeyPos), int(ci.StepCount)}
	}
	for _, c := range e.admins {
		addr := c.Options().Addr
		go w.follow(addr)
	}
	t.Cleanup(w.close)
	e.watch = w
}

func (w *keyWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, c := range w.conns {
		_ = c.Close()
	}
	w.wake.Broadcast()
}

// follow reads addr's MONITOR stream until the watch is closed, dialling
// again whenever the stream ends.
func (w *keyWatch) follow(addr string) {
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			time.Sleep(20 * time.Millisecond) // a stopped server: until it is back
			continue
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			_ = conn.Close()
			return
		}
		w.conns[addr] = conn
		w.mu.Unlock()
		w.read(conn)
		_ = conn.Close()
		w.mu.Lock()
		if !w.closed {
			w.gaps++
		}
		w.mu.Unlock()
	}
}

// read judges one MONITOR stream until it ends.
func (w *keyWatch) read(conn net.Conn) {
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	var declared map[string]bool // the current script call's KEYS, nil if unjudged
	var call string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		client, args, ok := parseMonitorLine(strings.TrimRight(line, "\r\n"))
		if !ok || len(args) == 0 {
			continue
		}
		cmd := strings.ToLower(args[0])
		if client != "lua" {
			declared, call = w.scriptCall(cmd, args)
			if cmd == "echo" && len(args) == 2 && strings.HasPrefix(args[1], syncToken) {
				w.mu.Lock()
				w.seen[args[1]] = true
				w.wake.Broadcast()
				w.mu.Unlock()
			}
			continue
		}
		if declared == nil {
			continue
		}
		w.mu.Lock()
		w.cmds++
		for _, k := range w.keysOf(cmd, args) {
			if !declared[k] {
				w.bad = append(w.bad, fmt.Sprintf("%s ran %s on %q, a key it does not declare", call, strings.Join(quoteArgs(args, 6), " "), k))
			}
		}
		w.mu.Unlock()
	}
}

// scriptCall returns the keys a script call declares, if it is one to
// judge, and the call, short, for messages.
func (w *keyWatch) scriptCall(cmd string, args []string) (map[string]bool, string) {
	switch cmd {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
	default:
		return nil, ""
	}
	if len(args) < 3 {
		return nil, ""
	}
	n, err := strconv.Atoi(args[2])
	if err != nil || n < 0 || 3+n > len(args) {
		return nil, ""
	}
	keys := args[3 : 3+n]
	ours := false
	declared := make(map[string]bool, n)
	for _, k := range keys {
		declared[k] = true
		ours = ours || strings.HasPrefix(k, "model:")
	}
	if !ours {
		return nil, ""
	}
	w.mu.Lock()
	w.calls++
	w.mu.Unlock()
	shown := append([]string{args[0], args[1][:min(len(args[1]), 12)], args[2]}, keys...)
	return declared, strings.Join(quoteArgs(shown, 8), " ")
}

// keysOf returns the keys among a command's arguments. w.mu is held.
func (w *keyWatch) keysOf(cmd string, args []string) []string {
	ks, ok := w.keySpec[cmd]
	if !ok || ks.first <= 0 {
		return nil
	}
	last := ks.last
	if last < 0 {
		last += len(args)
	}
	var keys []string
	for i := ks.first; i <= last && i < len(args); i += max(1, ks.step) {
		keys = append(keys, args[i])
	}
	return keys
}

// syncToken starts the ECHO a sync sends through each node.
const syncToken = "model-sync:"

var syncSeq struct {
	sync.Mutex
	n int
}

// sync waits until every node's stream has shown what the node ran before
// it: an ECHO sent through each node, sent again every 200 ms (a stream
// dialled again after CLIENT KILL misses the ones before), for at most 5 s
// in all; it reports whether every node's came through.
func (e *env) sync() bool {
	w := e.watch
	if w == nil {
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range e.admins {
		for {
			if time.Now().After(deadline) {
				return false
			}
			syncSeq.Lock()
			syncSeq.n++
			tok := fmt.Sprintf("%s%d", syncToken, syncSeq.n)
			syncSeq.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := c.Echo(ctx, tok).Err()
			cancel()
			if err != nil {
				return false
			}
			if w.await(tok, 200*time.Millisecond) {
				break
			}
		}
	}
	return true
}

// await reports whether the token tok comes through a stream within d.
func (w *keyWatch) await(tok string, d time.Duration) bool {
	timer := time.AfterFunc(d, func() {
		w.mu.Lock()
		w.wake.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	until := time.Now().Add(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.seen[tok] && !w.closed && time.Now().Before(until) {
		w.wake.Wait()
	}
	ok := w.seen[tok]
	delete(w.seen, tok)
	return ok
}

// take returns the violations found so far that name prefix, and forgets
// every violation found so far.
func (w *keyWatch) take(prefix string) []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, b := range w.bad {
		if strings.Contains(b, prefix) {
			out = append(out, b)
		}
	}
	w.bad = nil
	return out
}

// counts returns how many script calls and commands of theirs the watch
// judged, and how often a stream was lost.
func (w *keyWatch) counts() (calls, cmds, gaps int) {
	if w == nil {
		return 0, 0, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, w.cmds, w.gaps
}

// parseMonitorLine reads one line of MONITOR's output,
//
//	+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "ab…" "1" "key"
//
// into the client ("lua" for a script's own commands) and the arguments,
// whose quoting is Redis's sdscatrepr.
func parseMonitorLine(line string) (client string, args []string, ok bool) {
	open := strings.IndexByte(line, '[')
	shut := strings.IndexByte(line, ']')
	if !strings.HasPrefix(line, "+") || open < 0 || shut < open {
		return "", nil, false
	}
	_, client, _ = strings.Cut(line[open+1:shut], " ")
	rest := line[shut+1:]
	for i := 0; i < len(rest); i++ {
		if rest[i] != '"' {
			continue
		}
		var b strings.Builder
		i++
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c != '\\' || i+1 >= len(rest) {
				b.WriteByte(c)
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 < len(rest) {
					if v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8); err == nil {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(rest[i])
			}
		}
		args = append(args, b.String())
	}
	return client, args, true
}

// quoteArgs quotes up to n arguments for a message.
func quoteArgs(args []string, n int) []string {
	out := make([]string, 0, min(len(args), n)+1)
	for i, a := range args {
		if i == n {
			out = append(out, "…")
			break
		}
		out = append(out, strconv.Quote(a))
	}
	return out
}

func TestParseMonitorLine(t *testing.T) {
	tests := []struct {
		line   string
		client string
		args   []string
	}{
		{`+1796665992.060774 [0 127.0.0.1:57180] "evalsha" "ab" "1" "model:x:{a}"`, "127.0.0.1:57180", []string{"evalsha", "ab", "1", "model:x:{a}"}},
		{`+1796665992.060853 [0 lua] "ZADD" "k\"1" "-1" "#r\x00\xff\n"`, "lua", []string{"ZADD", `k"1`, "-1", "#r\x00\xff\n"}},
		{`+1796665992.060872 [0 unix:/tmp/r.sock] "GET" "a b\\"`, "unix:/tmp/r.sock", []string{"GET", `a b\`}},
	}
	for _, tt := range tests {
		client, args, ok := parseMonitorLine(tt.line)
		if !ok || client != tt.client || !slices.Equal(args, tt.args) {
			t.Errorf("parseMonitorLine(%q) = %q, %q, %v, want %q, %q, true", tt.line, client, args, ok, tt.client, tt.args)
		}
	}
	if _, _, ok := parseMonitorLine("+OK"); ok {
		t.Errorf("parseMonitorLine(%q) = ok, want not a command", "+OK")
	}
}

func TestSlotTag(t *testing.T) {
	// CLUSTER KEYSLOT 123456789 is 12739, the CRC16 check value's slot.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(%q) = %#x, want 0x31c3", "123456789", got)
	}
	for _, slot := range []int{0, 1, 5461, 10923, 16383} {
		if got := int(crc16(slotTag(slot)) % 16384); got != slot {
			t.Errorf("slot of slotTag(%d) = %d, want %d", slot, got, slot)
		}
	}
}
