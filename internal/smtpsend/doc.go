// Package smtpsend makes one SMTP delivery attempt of one email: straight
// to each recipient domain's mail exchangers ("mx" mode) or through one
// relay ("relay" mode), one message for all its recipients (Send) or one
// transaction per recipient, each with its own envelope sender and message
// (SendEach), the transactions to one domain sharing connections. It tells
// for each recipient whether the message was delivered, should be tried
// again later (deferred) or was refused for good (hard bounce).
//
// Retries, scheduling and persistence live elsewhere; a Send is a single
// attempt bounded by its context, so it can be tested against real SMTP and
// DNS servers on loopback. The settings are described in
// docs/sending.md ("Transports").
package smtpsend
