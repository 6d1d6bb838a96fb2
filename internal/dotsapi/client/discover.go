package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// endpoint is where the Dots API is reached, and how.
type endpoint struct {
	base string
	http *http.Client
	// own: the API server of the kubeconfig serves it itself (the
	// embedded API server), as far as the discovery ConfigMap says; why
	// says why it was not read when it could not be.
	own bool
	why error
}

// discovery finds the Dots API of the cluster a rest.Config names: the API
// server itself (the embedded one), or the server the ConfigMap
// wire.DiscoveryConfigMap names when the control plane runs against a
// cluster that is not its own, reached with the same credential. The answer
// is kept until a request shows it wrong: a connection that fails, or a 404
// from an API server that does not serve the Dots API.
type discovery struct {
	cfg *rest.Config

	mu  sync.Mutex
	cur *endpoint
}

func (d *discovery) endpoint(ctx context.Context) (*endpoint, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		return d.cur, nil
	}
	e, err := d.find(ctx)
	if err != nil {
		return nil, err
	}
	d.cur = e
	return e, nil
}

// forget drops the endpoint e, so the next request looks again.
func (d *discovery) forget(e *endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == e {
		d.cur = nil
	}
}

func (d *discovery) find(ctx context.Context) (*endpoint, error) {
	core, err := corev1client.NewForConfig(d.cfg)
	if err != nil {
		return nil, fmt.Errorf("make a client of the API server %s: %w", d.cfg.Host, err)
	}
	cm, err := core.ConfigMaps(dotsv1.SystemNamespace).Get(ctx, wire.DiscoveryConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		return d.published(cm.Data)
	case apierrors.IsNotFound(err):
		return d.own(nil)
	case apierrors.IsForbidden(err):
		// A cluster whose roles predate the ConfigMap's: the API server
		// may still serve the Dots API itself; if not, the answer says why.
		return d.own(err)
	default:
		where := fmt.Sprintf("find the Dots API (the ConfigMap %s/%s of %s)", dotsv1.SystemNamespace, wire.DiscoveryConfigMap, d.cfg.Host)
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			// The API server's own refusal (401: a credential it does not
			// know) is the caller's answer, with its status.
			return nil, &Error{Status: int(status.Status().Code), Message: where + ": " + status.Status().Message}
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
}

// own is the API server of the kubeconfig itself.
func (d *discovery) own(why error) (*endpoint, error) {
	hc, err := rest.HTTPClientFor(d.cfg)
	if err != nil {
		return nil, fmt.Errorf("make an HTTP client of the API server %s: %w", d.cfg.Host, err)
	}
	base := strings.TrimSuffix(d.cfg.Host, "/")
	if !strings.Contains(base, "://") {
		base = "https://" + base
	}
	return &endpoint{base: base, http: hc, own: true, why: why}, nil
}

// published is the server the ConfigMap names, with the kubeconfig's
// credential (a token, a client certificate or an exec plugin: the server
// asks the cluster about it) and the ConfigMap's CA instead of the
// cluster's.
func (d *discovery) published(data map[string]string) (*endpoint, error) {
	server := strings.TrimSuffix(data[wire.DiscoveryServerKey], "/")
	ca := data[wire.DiscoveryCAKey]
	if !strings.HasPrefix(server, "https://") || ca == "" {
		return nil, fmt.Errorf("the ConfigMap %s/%s does not say where the Dots API is (want %q, an https URL, and %q): restart the invisible-dots server that serves this cluster, which writes it",
			dotsv1.SystemNamespace, wire.DiscoveryConfigMap, wire.DiscoveryServerKey, wire.DiscoveryCAKey)
	}
	hc, err := rest.HTTPClientFor(ConfigAt(d.cfg, server, []byte(ca)))
	if err != nil {
		return nil, fmt.Errorf("make an HTTP client of the Dots API at %s: %w", server, err)
	}
	return &endpoint{base: server, http: hc}, nil
}

// ConfigAt is cfg's credential for the Dots API served at server (an https
// URL) with a certificate signed by ca (PEM), instead of cfg's API server.
func ConfigAt(cfg *rest.Config, server string, ca []byte) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = server
	c.APIPath = ""
	c.TLSClientConfig.CAData = ca
	c.TLSClientConfig.CAFile = ""
	c.TLSClientConfig.ServerName = ""
	c.TLSClientConfig.Insecure = false
	return c
}

// send sends one request to the Dots API: path and query under its
// endpoint, with body and the headers set by prepare.
func (c *Client) send(ctx context.Context, method, path, query string, body io.Reader, prepare func(*http.Request)) (*http.Response, *endpoint, error) {
	e, err := c.find.endpoint(ctx)
	if err != nil {
		return nil, nil, err
	}
	u := e.base + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, nil, err
	}
	if prepare != nil {
		prepare(req)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		if !e.own && ctx.Err() == nil {
			// The server may have moved; its ConfigMap says where now.
			c.find.forget(e)
		}
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, e, nil
}

// failed is the error of an answer of status with body data from e.
func (c *Client) failed(e *endpoint, status int, data []byte) error {
	err := errorOf(status, data)
	var apiErr *Error
	if status == http.StatusNotFound && e.own && errors.As(err, &apiErr) && apiErr.Code == "" {
		// Not an answer of the Dots API, which always says its code: this
		// API server does not serve it. Look for the ConfigMap again next
		// time (a server may publish it meanwhile).
		c.find.forget(e)
		hint := "no invisible-dots server has published where it serves it (the ConfigMap " + dotsv1.SystemNamespace + "/" + wire.DiscoveryConfigMap +
			"): run 'invisible-dots server --kubeconfig' for this cluster"
		if e.why != nil {
			hint = "and where it is could not be read: " + e.why.Error() + "; an administrator applies config/default (config/rbac/dots_api_discovery.yaml)"
		}
		apiErr.Message = fmt.Sprintf("the API server %s does not serve the Dots API (%s), %s", c.find.cfg.Host, wire.Prefix, hint)
	}
	return err
}
