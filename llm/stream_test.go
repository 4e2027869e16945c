package llmlimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const (
	chatChunks = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n"
	usageChunk = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\n"
	doneChunk  = "data: [DONE]\n\n"

	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

	responsesStream = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":4,\"output_tokens\":6,\"total_tokens\":10}}}\n\n"
)

// through writes stream to an answer in pieces of n bytes, as a reverse
// proxy passes on what it reads, and returns what the client got.
func through(t *testing.T, stream string, n int, strip bool) (*httptest.ResponseRecorder, *answer) {
	t.Helper()
	rec := httptest.NewRecorder()
	a := &answer{ResponseWriter: rec, strip: strip, fields: func(h http.Header) { h.Set("X-Test", "set") }}
	a.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	a.WriteHeader(http.StatusOK)
	for s := stream; len(s) > 0; {
		k := min(n, len(s))
		if _, err := a.Write([]byte(s[:k])); err != nil {
			t.Fatal(err)
		}
		a.Flush()
		s = s[k:]
	}
	a.finish()
	return rec, a
}

func TestStreamUsageChunkStrippedForClientsThatDidNotAsk(t *testing.T) {
	for _, n := range []int{1, 3, 7, 64, 1 << 20} {
		rec, a := through(t, chatChunks+usageChunk+doneChunk, n, true)
		if got, want := rec.Body.String(), chatChunks+doneChunk; got != want {
			t.Errorf("pieces of %d: the client got %q, want %q", n, got, want)
		}
		if u, ok := a.m.usage(); !ok || u.Total != 9 {
			t.Errorf("pieces of %d: usage = %+v, %v, want a total of 9", n, u, ok)
		}
		if rec.Header().Get("X-Test") != "set" {
			t.Errorf("pieces of %d: no rate-limit fields", n)
		}
	}
}

func TestStreamPassedWholeForClientsThatAsked(t *testing.T) {
	for _, n := range []int{1, 5, 1 << 20} {
		rec, a := through(t, chatChunks+usageChunk+doneChunk, n, false)
		if got, want := rec.Body.String(), chatChunks+usageChunk+doneChunk; got != want {
			t.Errorf("pieces of %d: the client got %q, want %q", n, got, want)
		}
		if u, ok := a.m.usage(); !ok || u.Total != 9 {
			t.Errorf("pieces of %d: usage = %+v, %v, want a total of 9", n, u, ok)
		}
	}
}

func TestStreamUsageOfAnthropicAndResponses(t *testing.T) {
	for _, tt := range []struct {
		stream string
		want   reported
	}{
		{anthropicStream, reported{Input: 25, Output: 15, Total: 40}},
		{responsesStream, reported{Input: 4, Output: 6, Total: 10}},
		{strings.ReplaceAll(anthropicStream, "\n", "\r\n"), reported{Input: 25, Output: 15, Total: 40}},
	} {
		for _, n := range []int{2, 1 << 20} {
			rec, a := through(t, tt.stream, n, false)
			if rec.Body.String() != tt.stream {
				t.Errorf("the client got %q, want the stream unchanged", rec.Body.String())
			}
			if u, ok := a.m.usage(); !ok || u != tt.want {
				t.Errorf("usage = %+v, %v, want %+v", u, ok, tt.want)
			}
		}
	}
}

func TestStreamBoundsWhatItHolds(t *testing.T) {
	long := "data: {\"x\":\"" + strings.Repeat("a", maxLine+10) + "\",\"usage\":{\"total_tokens\":5},\"choices\":[]}\n\n"
	rec, a := through(t, long+chatChunks+usageChunk, 4096, true)
	if got, want := rec.Body.String(), long+chatChunks; got != want {
		t.Errorf("the client got %d bytes, want %d: a line too long to read passes unread", len(got), len(want))
	}
	if u, _ := a.m.usage(); u.Total != 9 {
		t.Errorf("usage = %+v, want the total of the chunk after the long line, 9", u)
	}
	if cap(a.line) > 2*maxLine || cap(a.held) > 2*maxEvent {
		t.Errorf("held %d and %d bytes, want at most about %d", cap(a.line), cap(a.held), maxLine)
	}
	// An event that never ends is sent when the handler returns.
	rec, _ = through(t, "data: {\"choices\":[{}]}", 3, true)
	if rec.Body.String() != "data: {\"choices\":[{}]}" {
		t.Errorf("the client got %q, want the unended event", rec.Body.String())
	}
}

func TestJSONAnswerPassesUnread(t *testing.T) {
	rec := httptest.NewRecorder()
	a := &answer{ResponseWriter: rec, strip: true}
	a.Header().Set("Content-Type", "application/json")
	body := `{"choices":[],"usage":{"total_tokens":3}}`
	_, _ = a.Write([]byte(body))
	if rec.Body.String() != body {
		t.Errorf("the client got %q, want %q", rec.Body.String(), body)
	}
}

func FuzzStream(f *testing.F) {
	f.Add(chatChunks+usageChunk+doneChunk, 3)
	f.Add(anthropicStream, 1)
	f.Add("data: {\"choices\":[],\"usage\":{\"total_tokens\":-1}}\r\n\r\n", 7)
	f.Fuzz(func(t *testing.T, stream string, n int) {
		n = max(1, n%64+1)
		rec, a := through(t, stream, n, false)
		if rec.Body.String() != stream {
			t.Errorf("a stream not stripped came out as %q, want %q", rec.Body.String(), stream)
		}
		if u, ok := a.m.usage(); ok && (u.Input < 0 || u.Output < 0) {
			t.Errorf("usage %+v of %q", u, stream)
		}
		rec, _ = through(t, stream, n, true)
		if rec.Body.Len() > len(stream) {
			t.Errorf("a stripped stream grew: %d bytes from %d", rec.Body.Len(), len(stream))
		}
	})
}
