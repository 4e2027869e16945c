module github.com/slidelimit/slidelimit/llm

go 1.24

require (
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelimit/slidelimit/core v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
)

// Inside this repository the module builds against the sibling folder; a user
// gets the core version required above (replace is ignored in dependencies).
replace github.com/slidelimit/slidelimit/core => ../core
