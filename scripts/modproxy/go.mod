module github.com/slidelimit/slidelimit/scripts/modproxy

go 1.24

require golang.org/x/mod v0.17.0
