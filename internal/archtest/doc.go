// Package archtest holds the test that keeps the house's rooms apart: it
// reads the imports of every package of the module and checks them against
// the rules of docs/architecture.md (which room may import which). It has
// no code of its own; `go test ./internal/archtest` runs it, without root
// or the testbed.
package archtest
