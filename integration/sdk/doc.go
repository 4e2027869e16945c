// Package sdk holds the tests that point the official OpenAI and Anthropic
// Go SDKs at llmlimit in front of a fake API, against real Redis. It is a
// module of its own, outside go.work: the SDKs need a newer Go and newer
// OpenTelemetry than the workspace's modules pin, and no user of the
// library should inherit them. make test runs it with GOWORK=off.
package sdk
