package adapter

import (
	"fmt"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// JoinKeys returns a key function that keys a request by every identity
// keys return, joined with slidelimit.JoinIdentities, such as a route and
// a client: one quota per client and route. The first error is returned,
// and no keys at all is an error wrapping slidelimit.ErrInvalidKey. K is
// an adapter's key function type, such as httplimit.KeyFunc.
func JoinKeys[K ~func(C) (string, error), C any](keys ...K) K {
	return func(c C) (string, error) {
		if len(keys) == 0 {
			return "", fmt.Errorf("%w: JoinKeys has no key functions", slidelimit.ErrInvalidKey)
		}
		parts := make([]string, len(keys))
		for i, k := range keys {
			id, err := k(c)
			if err != nil {
				return "", err
			}
			parts[i] = id
		}
		return slidelimit.JoinIdentities(parts...), nil
	}
}

// FirstKey returns a key function that keys a request by the first of
// keys that returns a non-empty identity without error, such as an API key
// and else the client IP. If none does, it returns the last error, or an
// error wrapping slidelimit.ErrInvalidKey.
func FirstKey[K ~func(C) (string, error), C any](keys ...K) K {
	return func(c C) (string, error) {
		err := fmt.Errorf("%w: FirstKey has no key functions", slidelimit.ErrInvalidKey)
		for _, k := range keys {
			var id string
			if id, err = k(c); err == nil && id != "" {
				return id, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: every key function returned an empty identity", slidelimit.ErrInvalidKey)
		}
		return "", err
	}
}

// Strict turns a key function that returns "" for "no identity", as
// Fiber's KeyGenerator does, into one that returns an error wrapping
// slidelimit.ErrInvalidKey instead.
func Strict[C any](key func(C) string) func(C) (string, error) {
	return func(c C) (string, error) {
		if id := key(c); id != "" {
			return id, nil
		}
		return "", fmt.Errorf("%w: empty identity", slidelimit.ErrInvalidKey)
	}
}

// Lenient turns a key function that returns an error into one that
// returns "" instead, the converse of Strict.
func Lenient[C any](key func(C) (string, error)) func(C) string {
	return func(c C) string {
		id, err := key(c)
		if err != nil {
			return ""
		}
		return id
	}
}
