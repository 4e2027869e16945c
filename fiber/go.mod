module github.com/slidelimit/slidelimit/fiber

go 1.24

require (
	github.com/gofiber/fiber/v2 v2.52.9
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelimit/slidelimit/core v0.1.0
	github.com/valyala/fasthttp v1.51.0
)

require (
	github.com/andybalholm/brotli v1.1.0 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.17.9 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/tcplisten v1.0.0 // indirect
	golang.org/x/sys v0.28.0 // indirect
)

// Development builds against the sibling folder; a user of this module
// gets the core version required above (replace is ignored in dependencies).
replace github.com/slidelimit/slidelimit/core => ../core
