package llmlimit

import "testing"

func TestMeterReadsEachAPIsUsage(t *testing.T) {
	tests := []struct {
		name  string
		whole bool
		body  string
		want  reported
	}{
		{"chat completion", true, `{"id":"x","choices":[{"message":{"content":"usage"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}}}`,
			reported{Input: 9, Output: 12, Total: 21}},
		{"responses", true, `{"id":"r","output":[],"usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11}}`,
			reported{Input: 5, Output: 6, Total: 11}},
		{"embeddings", true, `{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`,
			reported{Input: 8, Total: 8}},
		{"anthropic message", true, `{"type":"message","content":[{"type":"text","text":"\"usage\":"}],"usage":{"input_tokens":10,"cache_read_input_tokens":2,"output_tokens":30}}`,
			reported{Input: 12, Output: 30, Total: 42}},
		{"the end of a long answer", false, `...ext"}}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
			reported{Input: 1, Output: 2, Total: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m meter
			m.readTail([]byte(tt.body), tt.whole)
			if got, ok := m.usage(); !ok || got != tt.want {
				t.Errorf("usage of %s = %+v, %v, want %+v", tt.body, got, ok, tt.want)
			}
		})
	}
}

func TestMeterWithoutUsage(t *testing.T) {
	for _, body := range []string{``, `{}`, `{"usage":null}`, `{"usage":{"total_tokens":"x"}}`, `{"usage":{"total_tokens":-4}}`, `not json "usage": {`, `{"usage":[1]}`} {
		var m meter
		m.readTail([]byte(body), true)
		m.readTail([]byte(body), false)
		if got, ok := m.usage(); ok {
			t.Errorf("usage of %q = %+v, true, want none", body, got)
		}
	}
}
