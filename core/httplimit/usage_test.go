package httplimit_test

import (
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/core/httplimit"
)

// Bodies in the shapes OpenAI-compatible APIs answer with, as their
// documentation shows them.
const (
	chatCompletion = `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The \"usage\": {\"total_tokens\": 1} field counts tokens.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {
      "cached_tokens": 0,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}
`
	chatStreamWithUsage = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}

data: [DONE]

`
	chatStreamWithoutUsage = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: [DONE]

`
	responsesBody = `{
  "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  "object": "response",
  "created_at": 1741476542,
  "status": "completed",
  "model": "gpt-4.1-2025-04-14",
  "output": [
    {
      "type": "message",
      "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
      "status": "completed",
      "role": "assistant",
      "content": [{"type": "output_text", "text": "In a peaceful grove...", "annotations": []}]
    }
  ],
  "usage": {
    "input_tokens": 36,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 87,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 123
  },
  "user": null,
  "metadata": {}
}`
	responsesStream = `event: response.created
data: {"type":"response.created","response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hi"}

event: response.completed
data: {"type":"response.completed","response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],"usage":{"input_tokens":37,"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48}}}

`
	completion = `{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	apiError   = `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
)

// cutBefore returns s from the first sep on, as the adapter keeps the end
// of a long body; the test fails if s holds no sep.
func cutBefore(t *testing.T, s, sep string) string {
	t.Helper()
	i := strings.Index(s, sep)
	if i < 0 {
		t.Fatalf("the body holds no %s", sep)
	}
	return s[i:]
}

func TestTotalTokens(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want int
		ok   bool
	}{
		{"chat completion", chatCompletion, 1163, true},
		{"chat stream with include_usage", chatStreamWithUsage, 11, true},
		{"chat stream without usage", chatStreamWithoutUsage, 0, false},
		{"Responses API body", responsesBody, 123, true},
		{"Responses API stream", responsesStream, 48, true},
		{"legacy completion", completion, 12, true},
		{"error", apiError, 0, false},
		{"empty", "", 0, false},
		// The end the adapter keeps of a long body: its start is cut.
		{"cut in the choices", cutBefore(t, chatCompletion, `"finish_reason"`), 1163, true},
		{"cut in the usage", cutBefore(t, chatCompletion, `"completion_tokens"`), 0, false},
		{"last usage is null", chatStreamWithUsage + `data: {"choices":[],"usage":null}` + "\n\n", 0, false},
		{"usage without total", `{"usage":{"input_tokens":3,"output_tokens":4}}`, 0, false},
		{"fractional total", `{"usage":{"total_tokens":21.5}}`, 0, false},
		{"negative total", `{"usage":{"total_tokens":-1}}`, 0, false},
		{"total as a quoted number", `{"usage":{"total_tokens":"21"}}`, 21, true},
		{"unterminated", `{"usage":{"total_tokens":21`, 0, false},
		{"usage as a value", `{"kind":"usage","n":{"total_tokens":5}}`, 0, false},
		{"spaces around the colon", `{"usage" :  {"total_tokens" : 7}}`, 7, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := httplimit.TotalTokens(httplimit.Response{Status: 200, Body: []byte(tt.body)})
			if got != tt.want || ok != tt.ok {
				t.Errorf("TotalTokens(%.40q…) = %d, %v; want %d, %v", tt.body, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzTotalTokens: any body gives an answer, never a panic, and a
// total it reports is at least 0.
func FuzzTotalTokens(f *testing.F) {
	for _, b := range []string{chatCompletion, chatStreamWithUsage, responsesStream, apiError, `"usage":{`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if n, ok := httplimit.TotalTokens(httplimit.Response{Body: body}); n < 0 || !ok && n != 0 {
			t.Errorf("TotalTokens = %d, %v", n, ok)
		}
	})
}
