package ofconn

import (
	"context"

	"github.com/egressflow/egressflow/openflow"
)

// What the external tests of this package read of its internals.
const UnsolicitedQueue = unsolicitedQueue

// Multipart sends a multipart request and returns every part of the reply.
func (c *Client) Multipart(ctx context.Context, req openflow.Message) ([][]byte, error) {
	return c.multipart(ctx, req)
}
