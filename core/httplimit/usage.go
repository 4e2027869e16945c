package httplimit

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// usageKey opens the usage object of an OpenAI-compatible response.
var usageKey = []byte(`"usage"`)

// TotalTokens returns the total_tokens of the last usage object in r's
// body, as an OpenAI-compatible API reports the tokens a request used, and
// whether there is one. It is a settle function for WithSettle (and the
// Settle options of the other HTTP adapters): admit a request's estimate,
// such as its max_tokens plus its prompt's, and settle what it used.
//
// It reads each shape such an API answers with:
//
//   - a JSON body, such as a chat completion's:
//     {"id":…, "choices":[…], "usage":{"prompt_tokens":9, "completion_tokens":12, "total_tokens":21}};
//   - a stream of Server-Sent Events whose last data chunk carries the
//     usage, as a chat completion's does with
//     "stream_options":{"include_usage":true} (the chunks before it carry
//     "usage":null), followed by "data: [DONE]";
//   - a Responses API body, or its stream's response.completed event,
//     whose usage holds total_tokens too.
//
// It sees only the end of the body the adapter kept (adapter.MaxBody, the
// last 64 KiB): a usage object before it is not found, nor one in a body
// left compressed (Content-Encoding) by the handler. Without a usage
// object, or when the last one has no total_tokens that is a whole number
// of at least 0, it returns false and the request keeps its estimate.
func TotalTokens(r Response) (int, bool) {
	i := bytes.LastIndex(r.Body, usageKey)
	for i >= 0 {
		// A key is followed by a colon; "usage" as a value is not.
		if rest := skipSpace(r.Body[i+len(usageKey):]); len(rest) > 0 && rest[0] == ':' {
			if rest = skipSpace(rest[1:]); len(rest) == 0 || rest[0] != '{' {
				return 0, false // "usage":null, as in a stream's earlier chunks
			}
			return totalTokens(rest)
		}
		i = bytes.LastIndex(r.Body[:i], usageKey)
	}
	return 0, false
}

// totalTokens reads the total_tokens of the JSON object at the start of b.
func totalTokens(b []byte) (int, bool) {
	var usage struct {
		TotalTokens *json.Number `json:"total_tokens"`
	}
	// A Decoder reads the object alone, whatever follows it.
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&usage); err != nil || usage.TotalTokens == nil {
		return 0, false
	}
	n, err := strconv.Atoi(usage.TotalTokens.String())
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

func skipSpace(b []byte) []byte {
	return bytes.TrimLeft(b, " \t\r\n")
}
