module github.com/slidelimit/slidelimit/integration/sdk

go 1.25

require (
	github.com/anthropics/anthropic-sdk-go/v2 v2.0.0
	github.com/openai/openai-go/v3 v3.1.0
	github.com/slidelimit/slidelimit/core v0.1.0
	github.com/slidelimit/slidelimit/llm v0.1.0
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/invopop/jsonschema v0.14.0 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/redis/go-redis/v9 v9.5.5 // indirect
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1 // indirect
	github.com/tidwall/gjson v1.18.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.opentelemetry.io/otel v1.33.0 // indirect
	go.opentelemetry.io/otel/metric v1.33.0 // indirect
	go.opentelemetry.io/otel/trace v1.33.0 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
	golang.org/x/sync v0.16.0 // indirect
)

// The official SDKs need newer Go and OpenTelemetry than the workspace's
// modules, so this module stays outside go.work (make test runs it with
// GOWORK=off) and takes the library from the tree.
replace (
	github.com/slidelimit/slidelimit/core => ../../core
	github.com/slidelimit/slidelimit/llm => ../../llm
)
