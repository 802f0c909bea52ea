package webhook

// Policy holds the operator switches that relax the destination rules.
// Both are meant for local development and tests: production keeps the zero
// value, which allows only https:// and only globally reachable addresses.
type Policy struct {
	// AllowHTTP permits plain http:// URLs
	// (MAILYARD_WEBHOOK_ALLOW_HTTP).
	AllowHTTP bool
	// AllowPrivateNetworks permits localhost and special-purpose addresses
	// such as loopback and private ranges
	// (MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS).
	AllowPrivateNetworks bool
}
