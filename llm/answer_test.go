package llmlimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// denial is a Result of a tree whose key's tokens deny a request.
func denial() slidelimit.Result {
	rpm := slidelimit.PerMinute(60).ForRequests().Named("key-requests")
	tpm := tokens(6000, time.Minute).Named("key-tokens")
	org := tokens(100000, time.Minute).Named("org-tokens")
	return slidelimit.Result{Limit: tpm, Remaining: 100, RetryAfter: 1500 * time.Millisecond, ResetAfter: 6 * time.Minute,
		Statuses: []slidelimit.Status{
			{Limit: org, Remaining: 90000, ResetAfter: 20 * time.Second},
			{Limit: rpm, Level: "key:sk-1", Remaining: 58, ResetAfter: 20 * time.Millisecond},
			{Limit: tpm, Level: "key:sk-1", Remaining: 100, RetryAfter: 1500 * time.Millisecond, ResetAfter: 6 * time.Minute},
			{Limit: slidelimit.InFlight(4, time.Minute).Named("key-in-flight"), Remaining: 0},
			{Limit: tokens(10, time.Minute).Named("key-shadow-tokens").Shadowed(), Remaining: 0, RetryAfter: time.Hour},
		}}
}

func TestOpenAIFields(t *testing.T) {
	h := http.Header{}
	setFields(h, OpenAI, denial(), time.Unix(0, 0))
	want := map[string]string{
		FieldLimitRequests: "60", FieldRemainingRequests: "58", FieldResetRequests: "20ms",
		FieldLimitTokens: "6000", FieldRemainingTokens: "100", FieldResetTokens: "1.5s",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if d := openAIDuration(6 * time.Minute); d != "6m0s" {
		t.Errorf("openAIDuration(6m) = %q, want 6m0s", d)
	}
}

func TestAnthropicFields(t *testing.T) {
	h := http.Header{}
	setFields(h, Anthropic, denial(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	want := map[string]string{
		FieldAnthropicRequestsLimit: "60", FieldAnthropicRequestsRemaining: "58", FieldAnthropicRequestsReset: "2026-01-02T03:04:05.02Z",
		FieldAnthropicTokensLimit: "6000", FieldAnthropicTokensRemaining: "100", FieldAnthropicTokensReset: "2026-01-02T03:04:06.5Z",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if h.Get(FieldLimitTokens) != "" {
		t.Errorf("Anthropic answer got OpenAI's fields: %v", h)
	}
}

func TestNoFieldsForFallbackOrShadow(t *testing.T) {
	for _, res := range []slidelimit.Result{{Fallback: true, Allowed: true}, {Shadow: true, Allowed: true, Statuses: denial().Statuses}} {
		h := http.Header{}
		setFields(h, OpenAI, res, time.Now())
		if len(h) != 0 {
			t.Errorf("setFields(%+v) = %v, want none", res, h)
		}
	}
}

func TestDenialBodies(t *testing.T) {
	rec := httptest.NewRecorder()
	writeDenial(rec, OpenAI, denial(), 700)
	var oa struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &oa); err != nil || rec.Code != 429 || oa.Error.Type != "tokens" || oa.Error.Code != "rate_limit_exceeded" || oa.Error.Message == "" {
		t.Errorf("OpenAI denial = %d %s (%v)", rec.Code, rec.Body, err)
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
	if got := rec.Header().Get("Retry-After-Ms"); got != "1500" {
		t.Errorf("Retry-After-Ms = %q, want 1500", got)
	}
	rec = httptest.NewRecorder()
	writeDenial(rec, Anthropic, denial(), 700)
	var an struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &an); err != nil || rec.Code != 429 || an.Type != "error" || an.Error.Type != "rate_limit_error" || an.Error.Message == "" {
		t.Errorf("Anthropic denial = %d %s (%v)", rec.Code, rec.Body, err)
	}
	if got := rec.Body.String(); !json.Valid([]byte(got)) {
		t.Errorf("not JSON: %s", got)
	}
}

func TestInFlightDenialRetriesSoon(t *testing.T) {
	for _, c := range []struct {
		after time.Duration
		want  string
	}{{59 * time.Second, "10"}, {2500 * time.Millisecond, "3"}} {
		res := slidelimit.Result{Limit: slidelimit.InFlight(4, time.Minute).Named("key-in-flight"), RetryAfter: c.after}
		rec := httptest.NewRecorder()
		writeDenial(rec, OpenAI, res, 10)
		if got := rec.Header().Get("Retry-After"); got != c.want {
			t.Errorf("Retry-After of an in-flight denial with RetryAfter %v = %q, want %s: when a place is expected to free, at most 10 s", c.after, got, c.want)
		}
	}
}
