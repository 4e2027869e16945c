module github.com/slidelimit/slidelimit/grpcinterceptor

go 1.24

require (
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelimit/slidelimit/core v0.1.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240318140521-94a12d6c2237
	google.golang.org/grpc v1.64.1
	google.golang.org/protobuf v1.33.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	golang.org/x/net v0.26.0 // indirect
	golang.org/x/sys v0.21.0 // indirect
	golang.org/x/text v0.16.0 // indirect
)

// Development builds against the sibling folder; a user of this module
// gets the core version required above (replace is ignored in dependencies).
replace github.com/slidelimit/slidelimit/core => ../core
