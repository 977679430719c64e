package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/mcpserver/args"
)

// checkArguments is a middleware that answers a tools/call whose
// arguments do not fit its tool's schema with a tool error naming the
// field, before the SDK's validation says it its own way.
func (s *server) checkArguments(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		s.mu.Lock()
		schema := s.schemas[call.Params.Name]
		s.mu.Unlock()
		if schema == nil {
			return next(ctx, method, req) // not a tool of ours: the SDK says so
		}
		args, err := args.Check(call.Params.Name, call.Params.Arguments, schema)
		if err != nil {
			res := &mcp.CallToolResult{}
			res.SetError(err)
			return res, nil
		}
		if args != nil {
			call.Params.Arguments = args
		}
		return next(ctx, method, req)
	}
}
