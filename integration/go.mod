module github.com/slidelimit/slidelimit/integration

go 1.24

require github.com/slidelimit/slidelimit/core v0.0.0

replace github.com/slidelimit/slidelimit/core => ../core
