module github.com/slidelimit/slidelimit/echo

go 1.24

require (
	github.com/labstack/echo/v4 v4.13.2
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelimit/slidelimit/core v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/labstack/gommon v0.4.2 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.31.0 // indirect
	golang.org/x/net v0.32.0 // indirect
	golang.org/x/sys v0.28.0 // indirect
	golang.org/x/text v0.21.0 // indirect
	golang.org/x/time v0.8.0 // indirect
)

// Development builds against the sibling folder; a user of this module
// gets the core version required above (replace is ignored in dependencies).
replace github.com/slidelimit/slidelimit/core => ../core
