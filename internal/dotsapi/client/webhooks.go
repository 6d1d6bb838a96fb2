package client

import (
	"context"
	"net/http"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// NewWebhookSecret has the server make a new signing secret for the Webhook
// namespace/name and store it in the Secret the Webhook owns (made when
// missing); the answer holds the secret, which is shown nowhere else.
func (c *Client) NewWebhookSecret(ctx context.Context, namespace, name string) (wire.WebhookSecret, error) {
	var out wire.WebhookSecret
	err := c.do(ctx, http.MethodPost, wire.WebhookSecretPath(namespace, name), "", nil, http.StatusOK, &out)
	return out, err
}
