// Package domainname validates and normalises the sending domains that
// customers add, so that every part of Mailyard stores and compares one
// canonical form: lower-case ASCII (IDNA "punycode" for internationalised
// names), no trailing dot.
//
// The error of every function is a sentence that can be shown to the customer
// as the detail of a validation error.
package domainname
