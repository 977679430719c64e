package mcpserver

import (
	"context"

	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What try and promote tell as they go (package toolcall): a
// promotion's stages as they change, a try's sandboxes as each is done.

func (s *server) followPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	return toolcall.FollowPromotion(ctx, s.c.Promotion, id)
}
