module github.com/slidelimit/slidelimit/examples

go 1.24

require github.com/slidelimit/slidelimit/core v0.0.0

// The examples build against the sibling folders; a copy of one outside
// this repository drops these lines and requires released versions.
replace (
	github.com/slidelimit/slidelimit/core => ../core
	github.com/slidelimit/slidelimit/echo => ../echo
	github.com/slidelimit/slidelimit/fiber => ../fiber
	github.com/slidelimit/slidelimit/gin => ../gin
	github.com/slidelimit/slidelimit/grpcinterceptor => ../grpcinterceptor
)
