// Package mcpclients runs MCP clients nobody on the project wrote against
// `sandboxctl mcp`, for the integration tests: the MCP inspector's CLI
// (`inspector --cli`, both protocol eras, tools called with `--tool-arg
// k=v` as any generic client fills a tool's schema; over stdio, or over
// HTTP to a server that outlives its runs) and a client on the
// TypeScript SDK (tsclient.mjs, which also reads a call's progress, the
// inspector's CLI showing none), each on Node 22.
//
// They are installed once, before the tests, by tests/install-deps.sh
// (install.sh here: npm ci of package-lock.json into
// /opt/sandboxd-test-node); Find fails, naming that script, when they are
// not there, so that a test never skips them silently.
package mcpclients
