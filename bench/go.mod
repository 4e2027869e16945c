module github.com/slidelimit/slidelimit/bench

go 1.24

replace github.com/slidelimit/slidelimit/core => ../core

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelimit/slidelimit/core v0.1.0
	github.com/ulule/limiter/v3 v3.11.2
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
