//go:build tools

// Package tools names the controller's command so that go mod tidy keeps
// what it imports.
package tools

import _ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
