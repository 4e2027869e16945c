package slidelimit

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// TestParseIntArray reads replies whole and cut at every byte: a cut reply
// is never consumed, a whole one exactly.
func TestParseIntArray(t *testing.T) {
	for _, tc := range []struct {
		reply   string
		want    []int64
		wantErr string // a prefix of the error; "" for none
	}{
		{reply: "*5\r\n:1\r\n:0\r\n:4\r\n:0\r\n:60000000\r\n", want: []int64{1, 0, 4, 0, 60000000}},
		{reply: "*2\r\n:-7\r\n:9223372036854775807\r\n", want: []int64{-7, 9223372036854775807}},
		{reply: "*0\r\n", want: []int64{}},
		{reply: "-NOSCRIPT No matching script. Please use EVAL.\r\n", wantErr: "NOSCRIPT No matching script"},
		{reply: "-MOVED 3999 127.0.0.1:6381\r\n", wantErr: "MOVED 3999"},
		{reply: "*2\r\n:1\r\n$3\r\nabc\r\n", wantErr: "redis protocol error: the script's reply"},
		{reply: "*2\r\n*1\r\n:1\r\n:2\r\n", wantErr: "redis protocol error: the script's reply"},
		{reply: "+OK\r\n", wantErr: "redis protocol error: unexpected reply"},
		{reply: "$-1\r\n", wantErr: "redis protocol error: unexpected reply"},
	} {
		b := []byte(tc.reply + "+NEXT\r\n") // a reply behind must stay unread
		k, got, err := parseIntArray(b, nil)
		if k != len(tc.reply) {
			t.Errorf("parseIntArray(%q) took %d bytes, want %d", tc.reply, k, len(tc.reply))
		}
		if tc.wantErr == "" {
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("parseIntArray(%q) = %v, %v; want %v", tc.reply, got, err, tc.want)
			}
		} else if err == nil || !bytes.HasPrefix([]byte(err.Error()), []byte(tc.wantErr)) {
			t.Errorf("parseIntArray(%q) error = %v, want one starting %q", tc.reply, err, tc.wantErr)
		}
		for cut := 0; cut < len(tc.reply); cut++ {
			if k, _, err := parseIntArray([]byte(tc.reply[:cut]), nil); k != 0 || err != nil {
				t.Errorf("parseIntArray(%q cut at %d) = %d bytes, %v; want 0 bytes and no error", tc.reply, cut, k, err)
			}
		}
	}
}

// TestParseIntArrayRefusesGarbage fails what is not RESP, so that the
// connection is closed rather than read out of step.
func TestParseIntArrayRefusesGarbage(t *testing.T) {
	for _, reply := range []string{"*x\r\n", "*1\r\n:1x\r\n", "?what\r\n", "*1\r\n:\r\n", "*1\r\n:-\r\n", "*1\n:1\n"} {
		k, _, err := parseIntArray([]byte(reply), nil)
		if k != 0 || !errors.Is(err, errProtocol) {
			if reply == "*1\n:1\n" && k == 0 && err == nil {
				continue // no CRLF yet: incomplete, as far as RESP can tell
			}
			t.Errorf("parseIntArray(%q) = %d bytes, %v; want 0 bytes and errProtocol", reply, k, err)
		}
	}
}

// TestSkipReply skips every RESP2 type, nested, and never a cut one.
func TestSkipReply(t *testing.T) {
	for _, reply := range []string{
		"+OK\r\n", "-ERR no\r\n", ":42\r\n", "$5\r\nhello\r\n", "$0\r\n\r\n", "$-1\r\n", "*-1\r\n",
		"*3\r\n$3\r\nabc\r\n*2\r\n:1\r\n+x\r\n-e\r\n",
		"$40\r\n0123456789012345678901234567890123456789\r\n",
	} {
		k, err := skipReply([]byte(reply + ":1\r\n"))
		if err != nil || k != len(reply) {
			t.Errorf("skipReply(%q) = %d, %v; want %d", reply, k, err, len(reply))
		}
		for cut := 0; cut < len(reply); cut++ {
			if k, err := skipReply([]byte(reply[:cut])); k != 0 || err != nil {
				t.Errorf("skipReply(%q cut at %d) = %d, %v; want 0 and no error", reply, cut, k, err)
			}
		}
	}
}

// TestAppendCommand encodes as Redis reads a command.
func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, "CLIENT", "SETNAME", ""))
	if want := "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$0\r\n\r\n"; got != want {
		t.Errorf("appendCommand = %q, want %q", got, want)
	}
	if got, want := string(appendBulkInt(nil, -1234567890123)), "$14\r\n-1234567890123\r\n"; got != want {
		t.Errorf("appendBulkInt = %q, want %q", got, want)
	}
}

// FuzzParse feeds the parsers anything: they never panic, never take more
// than they were given, and agree on how long a reply is.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*2\r\n:1\r\n:2\r\n", "-ERR x\r\n", "$3\r\nabc\r\n", "*1\r\n*1\r\n:1\r\n", "+OK\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, _, err := parseIntArray(b, nil)
		if k < 0 || k > len(b) {
			t.Fatalf("parseIntArray took %d of %d bytes", k, len(b))
		}
		n, serr := skipReply(b)
		if n < 0 || n > len(b) {
			t.Fatalf("skipReply took %d of %d bytes", n, len(b))
		}
		if k > 0 && serr == nil && n != k {
			t.Fatalf("parseIntArray took %d bytes (%v), skipReply %d", k, err, n)
		}
	})
}
