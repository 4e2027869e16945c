package llmlimit

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name string
		e    Endpoint
		body string
		want Request
	}{
		{"chat with max_tokens", ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`,
			Request{Endpoint: ChatCompletions, Model: "gpt-4o", MaxOutput: 100, InputBytes: len(`[{"role":"user","content":"hi"}]`)}},
		{"chat prefers max_completion_tokens", ChatCompletions, `{"messages":[],"max_tokens":100,"max_completion_tokens":50}`,
			Request{Endpoint: ChatCompletions, MaxOutput: 50, InputBytes: 2}},
		{"chat streamed, asking for usage", ChatCompletions, `{"messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
			Request{Endpoint: ChatCompletions, InputBytes: 2, Stream: true, IncludeUsage: true}},
		{"chat streamed, not asking", ChatCompletions, `{"messages":[],"stream":true,"stream_options":null}`,
			Request{Endpoint: ChatCompletions, InputBytes: 2, Stream: true}},
		{"completions", Completions, `{"prompt":"abcd","max_tokens":7}`,
			Request{Endpoint: Completions, MaxOutput: 7, InputBytes: 6}},
		{"responses", Responses, `{"input":"abcd","instructions":"ef","max_output_tokens":9,"stream":true}`,
			Request{Endpoint: Responses, MaxOutput: 9, InputBytes: 10, Stream: true}},
		{"embeddings never stream", Embeddings, `{"input":["a","b"],"stream":true}`,
			Request{Endpoint: Embeddings, InputBytes: 9}},
		{"messages", Messages, `{"model":"claude","system":"be brief","messages":[],"max_tokens":1024,"stream":true}`,
			Request{Endpoint: Messages, Model: "claude", MaxOutput: 1024, InputBytes: 12, Stream: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRequest(tt.e, []byte(tt.body))
			if err != nil || got != tt.want {
				t.Errorf("parseRequest(%s) = %+v, %v, want %+v", tt.body, got, err, tt.want)
			}
		})
	}
}

func TestParseRequestRefusesHostileBodies(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `"x"`, `{`, `{"messages":[}`,
		`{"max_tokens":"many"}`, `{"max_tokens":1e400}`, `{"max_tokens":-1}`, `{"max_tokens":1.5}`,
		`{"model":7}`, `{"stream":"yes"}`, `{"stream":true,"stream_options":"x"}`,
		`{"max_tokens":99999999999999999999}`,
	} {
		if got, err := parseRequest(ChatCompletions, []byte(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("parseRequest(%q) = %+v, %v, want an error wrapping ErrBadRequest", body, got, err)
		}
	}
}

func TestIncludeUsageKeepsEveryOtherField(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"m","messages":[],"stream":true,"stream_options":null}`,
		`{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":false,"other":1}}`,
	} {
		out, err := includeUsage([]byte(body))
		if err != nil {
			t.Fatalf("includeUsage(%s): %v", body, err)
		}
		var before, after map[string]any
		_ = json.Unmarshal([]byte(body), &before)
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("includeUsage(%s) = %s, not JSON: %v", body, out, err)
		}
		opts, _ := after["stream_options"].(map[string]any)
		if opts["include_usage"] != true {
			t.Errorf("includeUsage(%s) = %s, want include_usage true", body, out)
		}
		for k, v := range before {
			if k == "stream_options" {
				if m, ok := v.(map[string]any); ok && m["other"] != nil && opts["other"] == nil {
					t.Errorf("includeUsage(%s) = %s, lost stream_options.other", body, out)
				}
				continue
			}
			if !reflect.DeepEqual(after[k], v) {
				t.Errorf("includeUsage(%s) = %s, lost %s", body, out, k)
			}
		}
	}
	for _, body := range []string{`null`, `{"stream_options":[1]}`, `{`} {
		if _, err := includeUsage([]byte(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("includeUsage(%s) error = %v, want ErrBadRequest", body, err)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(`{"messages":[],"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`)
	f.Add(`{"input":"x","max_output_tokens":3}`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, e := range []Endpoint{ChatCompletions, Completions, Responses, Embeddings, Messages} {
			req, err := parseRequest(e, []byte(body))
			if err == nil && (req.MaxOutput < 0 || req.InputBytes < 0 || req.InputBytes > len(body)) {
				t.Errorf("parseRequest(%s, %q) = %+v", e, body, req)
			}
			if err == nil && req.Stream {
				_, _ = includeUsage([]byte(body))
			}
		}
	})
}
