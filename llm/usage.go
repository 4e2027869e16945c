package llmlimit

import (
	"bytes"
	"encoding/json"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// reported is the tokens a request used, as its answer reports them.
type reported struct {
	// Input is the prompt's tokens: prompt_tokens or input_tokens, with
	// Anthropic's cache_creation_input_tokens and cache_read_input_tokens.
	Input int
	// Output is the tokens generated: completion_tokens or output_tokens.
	Output int
	// Total is the tokens counted: total_tokens where the API reports it,
	// and otherwise Input plus Output.
	Total int
}

// usageFields holds every usage field of the APIs the middleware speaks;
// a field absent is nil.
type usageFields struct {
	TotalTokens              *int `json:"total_tokens"`
	PromptTokens             *int `json:"prompt_tokens"`
	CompletionTokens         *int `json:"completion_tokens"`
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
}

// meter adds up the usage an answer reports, in one JSON object or over
// the events of a stream: Anthropic's stream gives the input in
// message_start and the output, growing, in message_delta.
type meter struct {
	input, output, total int
	seen                 bool // some usage was read
	hasTotal             bool // total_tokens was read
}

// add records the usage object u, whose fields replace the ones read
// before: each event carries the figures so far, not increments.
func (m *meter) add(u *usageFields) {
	if u == nil {
		return
	}
	set := func(to *int, from ...*int) bool {
		found, sum := false, 0
		for _, f := range from {
			if f != nil && *f >= 0 {
				found, sum = true, sum+min(*f, slidelimit.MaxQuota) // no overflow from a hostile answer
			}
		}
		if found {
			*to = sum
		}
		return found
	}
	in := set(&m.input, u.PromptTokens, u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
	out := set(&m.output, u.CompletionTokens, u.OutputTokens)
	if set(&m.total, u.TotalTokens) {
		m.hasTotal = true
	}
	m.seen = m.seen || in || out || m.hasTotal
}

// usage returns the usage read, and whether there was any.
func (m *meter) usage() (reported, bool) {
	u := reported{Input: m.input, Output: m.output, Total: m.input + m.output}
	if m.hasTotal {
		u.Total = m.total
	}
	return u, m.seen
}

// event is what the meter reads of one JSON object, a whole answer or one
// event of a stream: the usage where each API puts it.
type event struct {
	Type     string                        `json:"type"`
	Choices  json.RawMessage               `json:"choices"`
	Usage    *usageFields                  `json:"usage"`
	Message  *struct{ Usage *usageFields } `json:"message"`  // Anthropic's message_start
	Response *struct{ Usage *usageFields } `json:"response"` // the Responses API's response.completed
}

var usageKey = []byte(`"usage"`)

// read records the usage in the JSON object b, and reports whether b is a
// chat or completion chunk that carries only usage ("choices":[]), the
// one a stream ends with when it was asked to include usage.
func (m *meter) read(b []byte) (usageOnly bool) {
	if !bytes.Contains(b, usageKey) {
		return false
	}
	var e event
	if json.Unmarshal(b, &e) != nil {
		return false
	}
	m.add(e.Usage)
	if e.Message != nil {
		m.add(e.Message.Usage)
	}
	if e.Response != nil {
		m.add(e.Response.Usage)
	}
	return e.Usage != nil && bytes.Equal(bytes.TrimSpace(e.Choices), []byte("[]"))
}

// readTail records the usage of a JSON answer of which b is the end: the
// whole answer when it fits, else the object that follows its last
// "usage" key, which OpenAI and Anthropic both send last or near it.
func (m *meter) readTail(b []byte, whole bool) {
	if whole {
		m.read(b)
		if m.seen {
			return
		}
	}
	for i := bytes.LastIndex(b, usageKey); i >= 0; i = bytes.LastIndex(b[:i], usageKey) {
		rest := bytes.TrimLeft(b[i+len(usageKey):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue // "usage" as a value, not a key
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		var u usageFields
		if len(rest) > 0 && rest[0] == '{' && json.NewDecoder(bytes.NewReader(rest)).Decode(&u) == nil {
			m.add(&u)
		}
		return
	}
}
