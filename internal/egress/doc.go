// Package egress is the one rule for where Mailyard's outgoing connections
// may go: never to special-purpose addresses (loopback, private, link-local,
// cloud metadata, ...) unless an operator allows private networks. Webhook
// deliveries (internal/webhook) and SMTP (internal/smtpsend) both dial
// through GuardDial, which checks the address actually connected to, after
// name resolution, so DNS rebinding cannot slip past a check made earlier.
// Both tell their customers why a connection failed with Describe, which
// leaves out Mailyard's own network (its resolver, its local addresses).
package egress
