package mcpserver

import (
	"context"

	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What try and promote tell as they go (package toolcall): a
// promotion's stages as they change, a try's sandboxes as they are made.

func (s *server) followPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	return toolcall.FollowPromotion(ctx, s.c.Promotion, id)
}

func (s *server) watchTry(ctx context.Context, prefix string, n int) (string, func()) {
	return toolcall.WatchTry(ctx, s.c.List, prefix, n)
}
