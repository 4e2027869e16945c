package slidelimit

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed allow.lua
	allowSource string
	//go:embed refund.lua
	refundSource string
	//go:embed reset.lua
	resetSource string

	// The scripts run with EVALSHA and are sent whole only when Redis
	// answers NOSCRIPT: after SCRIPT FLUSH, a restart, a failover or on a
	// new cluster shard.
	allowScript  = redis.NewScript(allowSource)
	refundScript = redis.NewScript(refundSource)
	resetScript  = redis.NewScript(resetSource)
)
