package fiberlimit

import "testing"

// TestBodyStreamFieldIsFound fails if the fasthttp this module requires
// no longer holds a response's body stream where teeBodyStream sets it:
// streamed bodies would then be settled without their bytes.
func TestBodyStreamFieldIsFound(t *testing.T) {
	if !bodyStreamFound {
		t.Fatal("fasthttp.Response has no bodyStream field of type io.Reader: teeBodyStream cannot capture a streamed body")
	}
}
