module github.com/slidelimit/slidelimit/integration

go 1.24

require (
	github.com/Shopify/toxiproxy/v2 v2.7.0
	github.com/gin-gonic/gin v1.9.1
	github.com/gofiber/fiber/v2 v2.52.9
	github.com/labstack/echo/v4 v4.13.2
	github.com/redis/go-redis/v9 v9.5.5
	github.com/rs/zerolog v1.31.0
	github.com/slidelimit/slidelimit/core v0.1.0
	github.com/slidelimit/slidelimit/echo v0.1.0
	github.com/slidelimit/slidelimit/fiber v0.1.0
	github.com/slidelimit/slidelimit/gin v0.1.0
	github.com/slidelimit/slidelimit/grpcinterceptor v0.1.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.64.1
	pgregory.net/rapid v1.1.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/matttproud/golang_protobuf_extensions v1.0.4 // indirect
	github.com/prometheus/client_golang v1.17.0 // indirect
	github.com/prometheus/client_model v0.4.1-0.20230718164431-9a2bf3000d16 // indirect
	github.com/prometheus/common v0.44.0 // indirect
	github.com/prometheus/procfs v0.11.1 // indirect
	github.com/rs/xid v1.5.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240318140521-94a12d6c2237 // indirect
	gopkg.in/tomb.v1 v1.0.0-20141024135613-dd632973f1e7 // indirect
)

require (
	github.com/andybalholm/brotli v1.1.0 // indirect
	github.com/bytedance/sonic v1.9.1 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/chenzhuoyu/base64x v0.0.0-20221115062448-fe3a3abad311 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/gabriel-vasile/mimetype v1.4.2 // indirect
	github.com/gin-contrib/sse v0.1.0 // indirect
	github.com/go-playground/locales v0.14.1 // indirect
	github.com/go-playground/universal-translator v0.18.1 // indirect
	github.com/go-playground/validator/v10 v10.14.0 // indirect
	github.com/goccy/go-json v0.10.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.17.9 // indirect
	github.com/klauspost/cpuid/v2 v2.2.4 // indirect
	github.com/labstack/gommon v0.4.2 // indirect
	github.com/leodido/go-urn v1.2.4 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/pelletier/go-toml/v2 v2.0.8 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/twitchyliquid64/golang-asm v0.15.1 // indirect
	github.com/ugorji/go/codec v1.2.11 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.51.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	github.com/valyala/tcplisten v1.0.0 // indirect
	golang.org/x/arch v0.3.0 // indirect
	golang.org/x/crypto v0.31.0 // indirect
	golang.org/x/net v0.32.0 // indirect
	golang.org/x/sys v0.28.0 // indirect
	golang.org/x/text v0.21.0 // indirect
	google.golang.org/protobuf v1.33.0
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

// Until the modules are tagged, build against the sibling folders.
replace (
	github.com/slidelimit/slidelimit/core => ../core
	github.com/slidelimit/slidelimit/echo => ../echo
	github.com/slidelimit/slidelimit/fiber => ../fiber
	github.com/slidelimit/slidelimit/gin => ../gin
)

replace github.com/slidelimit/slidelimit/grpcinterceptor => ../grpcinterceptor
