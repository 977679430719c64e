// Package optionstest checks options.Create, CreateSandbox's options,
// against an account of its own of what each option sets, for the fuzz
// targets that reach it: the options package's FuzzParseOptions and the
// front door's FuzzMessage, whose CreateSandbox calls carry options. It
// is for tests only.
package optionstest
