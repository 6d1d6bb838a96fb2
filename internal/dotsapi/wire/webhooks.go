package wire

import "net/url"

// A Webhook (a resource, kubectl get webhooks) is read, paused and removed
// through the resource API; its signing secret is made here, by the server,
// in the Secret the Webhook owns, so a person who may manage Webhooks and
// holds no Secrets (dots-editor) can give one a secret and rotate it.

// CodeSecretNotOwned: the Secret a Webhook's spec.secretRef names exists and
// is not that Webhook's (409); the server writes no Secret it does not own
// through the Webhook.
const CodeSecretNotOwned = "secret_not_owned"

// MaxWebhookSecretBody bounds the body of POST WebhookSecretPath, which
// takes none (or an empty JSON object).
const MaxWebhookSecretBody = 1 << 10

// WebhookSecretPath makes a new signing secret for the Webhook
// namespace/name (POST, no body: WebhookSecret), in the Secret its
// spec.secretRef names, made (owned by the Webhook) when missing.
func WebhookSecretPath(namespace, name string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/webhooks/" + url.PathEscape(name) + "/secret"
}

// WebhookSecret answers POST WebhookSecretPath: the new secret, shown this
// once (the server keeps it only in the Secret, which the caller may not be
// able to read).
type WebhookSecret struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Signature is the Webhook's scheme (github, standard, token), which
	// the secret's form follows.
	Signature string `json:"signature"`
	Secret    string `json:"secret"`
	// SecretName is the Secret holding it; Created says it was made now.
	SecretName string `json:"secret_name"`
	Created    bool   `json:"created"`
	// Warning says what did not happen beside the stored secret: the
	// Webhook could not be marked rotated, so the listener may take the
	// old secret for up to 10 s more.
	Warning string `json:"warning,omitempty"`
}
