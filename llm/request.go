package llmlimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// API is the wire format of a request and its answer: which rate-limit
// header fields and which error body a client of it understands.
type API uint8

// The APIs the middleware speaks.
const (
	// OpenAI is the OpenAI API and those compatible with it: x-ratelimit-…
	// header fields and {"error":{…}} bodies.
	OpenAI API = iota
	// Anthropic is Anthropic's Messages API: anthropic-ratelimit-… header
	// fields and {"type":"error","error":{…}} bodies.
	Anthropic
)

// Endpoint is one of the API endpoints the middleware limits, by path.
type Endpoint string

// The endpoints the middleware limits; requests to any other path pass
// unlimited.
const (
	ChatCompletions Endpoint = "/v1/chat/completions"
	Completions     Endpoint = "/v1/completions"
	Responses       Endpoint = "/v1/responses"
	Embeddings      Endpoint = "/v1/embeddings"
	Messages        Endpoint = "/v1/messages"
)

// endpointOf returns the endpoint a URL path names, and whether it is one
// the middleware limits. A prefix before /v1 (a gateway's mount point) is
// allowed.
func endpointOf(path string) (Endpoint, bool) {
	for _, e := range []Endpoint{ChatCompletions, Completions, Responses, Embeddings, Messages} {
		if strings.HasSuffix(path, string(e)) {
			return e, true
		}
	}
	return "", false
}

// API returns the wire format of e.
func (e Endpoint) API() API {
	if e == Messages {
		return Anthropic
	}
	return OpenAI
}

// Request is what the middleware reads of a request's JSON body to
// estimate its cost: it is given to the key and estimate functions.
type Request struct {
	// Endpoint is the endpoint called.
	Endpoint Endpoint
	// Model is the body's model, "" if none.
	Model string
	// MaxOutput is the most output tokens the request asks for:
	// max_completion_tokens, max_tokens or max_output_tokens, whichever
	// the endpoint reads; 0 if it names none (and for embeddings).
	MaxOutput int
	// InputBytes is the size in bytes of the body's input: messages
	// (and system for Anthropic), prompt, input (and instructions), as
	// JSON.
	InputBytes int
	// Stream reports whether the answer is asked for as Server-Sent
	// Events.
	Stream bool
	// IncludeUsage reports whether a streamed chat or completion request
	// asked for its usage itself (stream_options.include_usage).
	IncludeUsage bool
}

// ErrBadRequest means a request's body is not one the endpoint takes:
// not a JSON object, or a field of the wrong type. The middleware answers
// it 400 in the API's error format.
var ErrBadRequest = errors.New("llmlimit: invalid request body")

// body is the part of a request body the middleware reads. Fields of
// several endpoints share it; json.RawMessage keeps the input unparsed.
type body struct {
	Model               *string         `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxOutputTokens     *int            `json:"max_output_tokens"`
	Stream              *bool           `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	System              json.RawMessage `json:"system"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        json.RawMessage `json:"instructions"`
}

// parseRequest reads what the middleware needs of the JSON body b of a
// request to e. Errors wrap ErrBadRequest.
func parseRequest(e Endpoint, b []byte) (Request, error) {
	req := Request{Endpoint: e}
	var v body
	if !isObject(b) {
		return req, fmt.Errorf("%w: not a JSON object", ErrBadRequest)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if v.Model != nil {
		req.Model = *v.Model
	}
	req.Stream = v.Stream != nil && *v.Stream
	var max *int
	switch e {
	case ChatCompletions:
		max = v.MaxCompletionTokens
		if max == nil {
			max = v.MaxTokens
		}
		req.InputBytes = size(v.Messages)
	case Completions:
		max, req.InputBytes = v.MaxTokens, size(v.Prompt)
	case Responses:
		max, req.InputBytes = v.MaxOutputTokens, size(v.Input)+size(v.Instructions)
	case Embeddings:
		req.InputBytes, req.Stream = size(v.Input), false
	case Messages:
		max, req.InputBytes = v.MaxTokens, size(v.Messages)+size(v.System)
	}
	if max != nil {
		if *max < 0 {
			return req, fmt.Errorf("%w: a maximum of %d output tokens", ErrBadRequest, *max)
		}
		req.MaxOutput = *max
	}
	if req.Stream && (e == ChatCompletions || e == Completions) && size(v.StreamOptions) > 0 {
		var opts struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(v.StreamOptions, &opts); err != nil {
			return req, fmt.Errorf("%w: stream_options: %w", ErrBadRequest, err)
		}
		req.IncludeUsage = opts.IncludeUsage != nil && *opts.IncludeUsage
	}
	return req, nil
}

// size is the length of a raw JSON value, 0 for none or null.
func size(raw json.RawMessage) int {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0
	}
	return len(raw)
}

// includeUsage returns the body b of a streamed request with
// "stream_options":{"include_usage":true}, every other field as it was.
func includeUsage(b []byte) ([]byte, error) {
	var req map[string]json.RawMessage
	if !isObject(b) {
		return nil, fmt.Errorf("%w: not a JSON object", ErrBadRequest)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	opts := map[string]json.RawMessage{}
	if raw := req["stream_options"]; size(raw) > 0 {
		if !isObject(raw) {
			return nil, fmt.Errorf("%w: stream_options is not an object", ErrBadRequest)
		}
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("%w: stream_options: %w", ErrBadRequest, err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, fmt.Errorf("llmlimit: stream_options: %w", err)
	}
	req["stream_options"] = raw
	out, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("llmlimit: request body: %w", err)
	}
	return out, nil
}

// isObject reports whether b holds a JSON object, by its first byte.
func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}
