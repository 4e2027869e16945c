module github.com/slidelimit/slidelimit/fiber

go 1.24

require github.com/slidelimit/slidelimit/core v0.0.0

// Until core is tagged, build against the sibling folder.
replace github.com/slidelimit/slidelimit/core => ../core
