package grpclimit

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoIdentity means a KeyFunc found nothing in a call to identify its
// caller by: no metadata value, no authenticated user, no peer IP address.
// FirstKey tries its next KeyFunc on it. A call whose key fails with it is
// refused with the code the KeyFunc chose, codes.Unauthenticated when it
// chose none.
var ErrNoIdentity = errors.New("grpclimit: no identity")

// noIdentity is an error that wraps ErrNoIdentity and carries the status
// the call is refused with.
type noIdentity struct {
	code codes.Code
	msg  string
}

func (e *noIdentity) Error() string              { return e.msg }
func (e *noIdentity) Is(target error) bool       { return target == ErrNoIdentity }
func (e *noIdentity) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }
