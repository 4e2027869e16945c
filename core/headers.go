package slidelimit

import (
	"bytes"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"
)

// HeaderSet selects groups of rate-limit header fields.
type HeaderSet uint8

const (
	// HeaderRateLimit is the pair RateLimit-Policy and RateLimit of
	// draft-ietf-httpapi-ratelimit-headers-10, one list item per limit:
	//
	//	RateLimit-Policy: "100/1m";q=100;w=60
	//	RateLimit: "100/1m";r=42;t=17
	HeaderRateLimit HeaderSet = 1 << iota
	// HeaderXRateLimit is X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset for the deciding limit.
	HeaderXRateLimit
	// HeaderRetryAfter is Retry-After on denials.
	HeaderRetryAfter
)

// Headers maps a Result to rate-limit header fields. It is the one mapping
// every adapter uses, for HTTP headers and gRPC metadata alike. The zero
// value writes every field, with X-RateLimit-Reset in seconds from now.
//
// All times are whole seconds rounded up. The t parameter of RateLimit and
// X-RateLimit-Reset give, for a limit that denies the request, the time
// until it would admit it (RetryAfter, equal to Retry-After), and otherwise
// the time until its window is empty and its whole quota is back
// (ResetAfter). Retry-After is at least 1. A Fallback Result gets no field
// that claims quota, only Retry-After and only on a denial, but a Local one
// (FailLocal's), whose fields claim this process's shares. A Shadow Result
// gets no field at all: the request was admitted, and its quota fields would
// report a denial the client never saw. Within a Result, a shadow limit
// (Limit.Shadow) gets no field, nor an in-flight one (Limit.InFlight),
// which holds places rather than a quota over time; when one of them
// decides the Result, the X-RateLimit fields, which describe the deciding
// limit, are left out.
type Headers struct {
	// Omit lists the groups not to write.
	Omit HeaderSet
	// ResetUnix writes X-RateLimit-Reset as a Unix time in seconds, as
	// GitHub does, rather than as seconds from now.
	ResetUnix bool
}

// Header field names written by Headers.Write, in canonical form.
const (
	// FieldRateLimitPolicy names the field that lists each limit with its
	// quota (q) and its window in seconds (w).
	FieldRateLimitPolicy = "RateLimit-Policy"
	// FieldRateLimit names the field that lists each limit with its
	// remaining units (r) and its t in seconds, as described on Headers.
	FieldRateLimit = "RateLimit"
	// FieldXRateLimitLimit names the field that holds the deciding limit's
	// quota.
	FieldXRateLimitLimit = "X-Ratelimit-Limit"
	// FieldXRateLimitRemaining names the field that holds the units the
	// deciding limit has left.
	FieldXRateLimitRemaining = "X-Ratelimit-Remaining"
	// FieldXRateLimitReset names the field that holds the deciding limit's
	// t, in seconds from now or, with Headers.ResetUnix, as a Unix time.
	FieldXRateLimitReset = "X-Ratelimit-Reset"
	// FieldRetryAfter names the field that holds, on a denial, the whole
	// seconds to wait before retrying.
	FieldRetryAfter = "Retry-After"
)

// The header fields in the order Write sets them, and their names as
// http.Header.Set stores them (net/http canonicalises "RateLimit" to
// "Ratelimit").
const (
	fieldPolicy = iota
	fieldState
	fieldLimit
	fieldRemaining
	fieldReset
	fieldRetryAfter
	numFields
)

var (
	fieldNames = [numFields]string{FieldRateLimitPolicy, FieldRateLimit,
		FieldXRateLimitLimit, FieldXRateLimitRemaining, FieldXRateLimitReset, FieldRetryAfter}
	httpFieldNames = [numFields]string{"Ratelimit-Policy", "Ratelimit",
		FieldXRateLimitLimit, FieldXRateLimitRemaining, FieldXRateLimitReset, FieldRetryAfter}
)

// headerFields holds the header fields of one Result, their values
// formatted into one buffer, as Headers.format returns them.
type headerFields struct {
	buf   []byte
	n     int
	which [numFields]uint8 // which field, by index
	end   [numFields]int   // where its value ends in buf; it starts where the previous one ends
}

// field returns the name and value of field i, 0 <= i < f.n, in the
// order and form Headers.Write gives them. The value points into the
// buffer given to Headers.format.
func (f *headerFields) field(i int) (name string, value []byte) {
	return fieldNames[f.which[i]], f.buf[f.start(i):f.end[i]]
}

func (f *headerFields) start(i int) int {
	if i == 0 {
		return 0
	}
	return f.end[i-1]
}

// add records that the bytes appended to f.buf since the previous field
// are the value of field.
func (f *headerFields) add(field int) {
	f.which[f.n], f.end[f.n] = uint8(field), len(f.buf)
	f.n++
}

// groups returns the groups of fields r gets.
func (h Headers) groups(r Result) HeaderSet {
	if r.Shadow {
		return 0
	}
	var g HeaderSet
	if !r.Fallback || r.Local {
		for _, st := range r.Statuses {
			if fielded(st.Limit) {
				g |= HeaderRateLimit
				if fielded(r.Limit) {
					g |= HeaderXRateLimit
				}
				break
			}
		}
	}
	if !r.Allowed && (r.Fallback || len(r.Statuses) > 0) {
		g |= HeaderRetryAfter
	}
	return g &^ h.Omit
}

// fielded reports whether lim gets quota fields: a limit of units in a
// window, enforced. A shadow limit gets none (its denials are not the
// client's), nor a limit on requests in flight, whose place is not a quota
// over time.
func fielded(lim Limit) bool { return !lim.Shadow && !lim.InFlight }

// format formats the header fields r should carry, appending their values
// to buf[:0]. It is the one place that knows what the fields hold.
func (h Headers) format(r Result, buf []byte) headerFields {
	f := headerFields{buf: buf[:0]}
	g := h.groups(r)
	if g&HeaderRateLimit != 0 {
		first := true
		for _, s := range r.Statuses {
			if !fielded(s.Limit) {
				continue
			}
			if !first {
				f.buf = append(f.buf, ", "...)
			}
			first = false
			f.buf = appendQuotedLimit(f.buf, s.Limit)
			f.buf = append(f.buf, ";q="...)
			f.buf = strconv.AppendInt(f.buf, int64(s.Limit.Quota), 10)
			f.buf = append(f.buf, ";w="...)
			f.buf = strconv.AppendInt(f.buf, s.Limit.windowSeconds(), 10)
		}
		f.add(fieldPolicy)
		first = true
		for _, s := range r.Statuses {
			if !fielded(s.Limit) {
				continue
			}
			if !first {
				f.buf = append(f.buf, ", "...)
			}
			first = false
			f.buf = appendQuotedLimit(f.buf, s.Limit)
			f.buf = append(f.buf, ";r="...)
			f.buf = strconv.AppendInt(f.buf, int64(s.Remaining), 10)
			f.buf = append(f.buf, ";t="...)
			f.buf = strconv.AppendInt(f.buf, resetSeconds(s), 10)
		}
		f.add(fieldState)
	}
	if g&HeaderXRateLimit != 0 {
		d := Status{Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
		reset := resetSeconds(d)
		if h.ResetUnix {
			reset += time.Now().Unix()
		}
		f.buf = strconv.AppendInt(f.buf, int64(r.Limit.Quota), 10)
		f.add(fieldLimit)
		f.buf = strconv.AppendInt(f.buf, int64(r.Remaining), 10)
		f.add(fieldRemaining)
		f.buf = strconv.AppendInt(f.buf, reset, 10)
		f.add(fieldReset)
	}
	if g&HeaderRetryAfter != 0 {
		f.buf = strconv.AppendInt(f.buf, RetryAfterSeconds(r), 10)
		f.add(fieldRetryAfter)
	}
	return f
}

// Write calls set once for each header field r should carry, in a fixed
// order. Names are in canonical MIME form; gRPC callers lower-case them.
// The values may be kept: nothing writes their bytes again.
func (h Headers) Write(r Result, set func(name, value string)) {
	f, _ := h.formatOnce(r)
	for i := range f.n {
		name, v := f.field(i)
		set(name, keep(v))
	}
}

// SetHeader sets each header field r should carry in header, an
// http.Header, as Write with header.Set would, with the names canonical as
// net/http makes them ("Ratelimit-Policy"). The fields of a Result that a
// Limiter returned take no allocation, the first time they are set: their
// values live in the Result's own memory, each in a slice of capacity one,
// so that a later header.Add copies rather than writes into it.
func (h Headers) SetHeader(r Result, header map[string][]string) {
	f, sc := h.formatOnce(r)
	for i := range f.n {
		_, v := f.field(i)
		sc.vals[i] = keep(v)
		header[httpFieldNames[f.which[i]]] = sc.vals[i : i+1 : i+1]
	}
}

// fieldBufSize is the room for header values in a decision; longer ones
// (many limits, long names) grow onto the heap.
const fieldBufSize = 128

// fieldScratch is the memory of the header fields of one Result, written
// once: by the first writer that claims it.
type fieldScratch struct {
	claimed atomic.Bool
	buf     [fieldBufSize]byte
	vals    [numFields]string
}

// formatOnce formats r's fields into memory that nothing writes again: the
// scratch of r's decision if this is the first write of the Result's
// fields, and otherwise a scratch of their own.
func (h Headers) formatOnce(r Result) (headerFields, *fieldScratch) {
	if h.groups(r) == 0 {
		return headerFields{}, nil
	}
	var sc *fieldScratch
	if r.d != nil && r.d.fields.claimed.CompareAndSwap(false, true) {
		sc = &r.d.fields
	} else {
		sc = new(fieldScratch)
	}
	return h.format(r, sc.buf[:0]), sc
}

// keep returns v, bytes that nothing writes again, as a string without
// copying them.
func keep(v []byte) string {
	return unsafe.String(unsafe.SliceData(v), len(v))
}

// appendQuotedLimit appends lim.String() as a quoted string, as
// strconv.Quote gives it.
func appendQuotedLimit(b []byte, lim Limit) []byte {
	start := len(b)
	b = append(b, '"')
	if lim.Name != "" {
		b = append(b, lim.Name...)
	} else {
		b = strconv.AppendInt(b, int64(lim.Quota), 10)
		b = append(b, '/')
		b = appendShortDuration(b, lim.Window)
	}
	for _, c := range b[start+1:] {
		if c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return strconv.AppendQuote(b[:start], lim.String()) // not a valid Limit's name
		}
	}
	return append(b, '"')
}

// appendShortDuration appends shortDuration(d): d as time.Duration.String
// formats it, without trailing zero units ("1m" rather than "1m0s").
func appendShortDuration(b []byte, d time.Duration) []byte {
	var arr [32]byte
	w := formatDuration(&arr, d)
	s := arr[w:]
	if bytes.HasSuffix(s, []byte("m0s")) {
		s = s[:len(s)-2]
	}
	if bytes.HasSuffix(s, []byte("h0m")) {
		s = s[:len(s)-2]
	}
	return append(b, s...)
}

// formatDuration formats d into the end of buf as time.Duration.String
// does, and returns the index where the text begins. It is
// time.Duration.String's algorithm, which allocates its result.
func formatDuration(buf *[32]byte, d time.Duration) int {
	w := len(buf)
	u := uint64(d)
	neg := d < 0
	if neg {
		u = -u
	}
	if u < uint64(time.Second) {
		var prec int
		w--
		buf[w] = 's'
		w--
		switch {
		case u == 0:
			buf[w] = '0'
			return w
		case u < uint64(time.Microsecond):
			prec = 0
			buf[w] = 'n'
		case u < uint64(time.Millisecond):
			prec = 3
			w-- // µ is two bytes
			copy(buf[w:], "µ")
		default:
			prec = 6
			buf[w] = 'm'
		}
		w, u = formatFrac(buf[:w], u, prec)
		w = formatUint(buf[:w], u)
	} else {
		w--
		buf[w] = 's'
		w, u = formatFrac(buf[:w], u, 9)
		w = formatUint(buf[:w], u%60)
		u /= 60
		if u > 0 {
			w--
			buf[w] = 'm'
			w = formatUint(buf[:w], u%60)
			u /= 60
			if u > 0 {
				w--
				buf[w] = 'h'
				w = formatUint(buf[:w], u)
			}
		}
	}
	if neg {
		w--
		buf[w] = '-'
	}
	return w
}

// formatFrac formats the fraction of v/10**prec (such as ".12345") into
// the end of buf, omitting trailing zeros and the dot if the fraction is
// 0, and returns the index where the text begins and v/10**prec.
func formatFrac(buf []byte, v uint64, prec int) (int, uint64) {
	w := len(buf)
	digits := false
	for range prec {
		digit := v % 10
		digits = digits || digit != 0
		if digits {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if digits {
		w--
		buf[w] = '.'
	}
	return w, v
}

// formatUint formats v into the end of buf and returns the index where
// the text begins.
func formatUint(buf []byte, v uint64) int {
	w := len(buf)
	if v == 0 {
		w--
		buf[w] = '0'
		return w
	}
	for v > 0 {
		w--
		buf[w] = byte(v%10) + '0'
		v /= 10
	}
	return w
}

// RetryAfterSeconds returns r.RetryAfter in whole seconds, rounded up and
// at least 1: the value of Retry-After.
func RetryAfterSeconds(r Result) int64 {
	return max(1, ceilSeconds(r.RetryAfter))
}

// resetSeconds is the t of one limit: RetryAfter while it denies,
// ResetAfter otherwise.
func resetSeconds(s Status) int64 {
	if s.RetryAfter > 0 {
		return max(1, ceilSeconds(s.RetryAfter))
	}
	return ceilSeconds(s.ResetAfter)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
