module github.com/slidelimit/slidelimit/prometheus

go 1.24

require github.com/slidelimit/slidelimit/core v0.1.0

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/golang/protobuf v1.4.3 // indirect
	github.com/matttproud/golang_protobuf_extensions v1.0.1 // indirect
	github.com/prometheus/client_golang v1.11.1
	github.com/prometheus/client_model v0.2.0 // indirect
	github.com/prometheus/common v0.26.0
	github.com/prometheus/procfs v0.6.0 // indirect
	github.com/redis/go-redis/v9 v9.5.5
	golang.org/x/sys v0.0.0-20210603081109-ebe580a85c40 // indirect
	google.golang.org/protobuf v1.26.0-rc.1 // indirect
)

replace github.com/slidelimit/slidelimit/core => ../core
