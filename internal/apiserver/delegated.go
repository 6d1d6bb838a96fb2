package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"
)

// DelegatedOptions configure a server of the mounts alone, for a control
// plane that runs against a cluster that is not ours (server --kubeconfig):
// the cluster decides who a caller is (TokenReview, or its client CA) and
// what the caller may do (SubjectAccessReview), as for an aggregated API
// server or metrics-server, so the same kubeconfig and the same RBAC rules
// (config/rbac's nonResourceURLs) work as on the embedded API server.
type DelegatedOptions struct {
	// ListenAddress is host:port of the HTTPS endpoint.
	ListenAddress string
	// PKIDir holds the CA and the serving certificate (made when missing);
	// clients trust the CA through the discovery ConfigMap.
	PKIDir string
	// Kubeconfig is the file of the cluster's credential the reviews are
	// asked with; Cluster is the same credential read, given to the mounts.
	Kubeconfig string
	Cluster    *rest.Config
	// Mounts are served behind the upstream filters: authentication,
	// authorization, in-flight limits and the request timeout, from which
	// Mount.LongRunning paths escape as on the embedded server.
	Mounts []Mount
	Log    logr.Logger
}

// Delegated is a running server of the mounts.
type Delegated struct {
	// URL is https://host:port of the listener, as clients reach it.
	URL string
	// CA is the PEM of the CA that signed its serving certificate.
	CA []byte

	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// StartDelegated serves o.Mounts on o.ListenAddress and returns once the
// listener answers.
func StartDelegated(ctx context.Context, o DelegatedOptions) (*Delegated, error) {
	host, portText, err := net.SplitHostPort(o.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("the listen address %q is not host:port: %w", o.ListenAddress, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("the listen address %q has no valid port", o.ListenAddress)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("the listen address %q must name an IP address", o.ListenAddress)
	}
	pki := PKI{Dir: o.PKIDir}
	if err := pki.Ensure(host); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(pki.CACert())
	if err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}

	// The server's own errors (401, 403, 429) are metav1.Status objects.
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	cfg := genericapiserver.NewConfig(serializer.NewCodecFactory(scheme))
	cfg.EffectiveVersion = compatibility.NewEffectiveVersionFromString(baseversion.DefaultKubeBinaryVersion, "", "")
	cfg.EnableProfiling = false
	cfg.EnableDiscovery = false
	cfg.EnableIndex = false
	cfg.LongRunningFunc = withLongRunningMounts(cfg.LongRunningFunc, o.Mounts)

	serving := genericoptions.NewSecureServingOptions()
	serving.BindAddress = ip
	serving.BindPort = port
	serving.ServerCert.CertKey = genericoptions.CertKey{CertFile: pki.ServingCert(), KeyFile: pki.ServingKey()}
	// The generic server wants a loopback client of itself (it serves
	// nothing to it here; it gets a certificate of its own in memory).
	if err := serving.WithLoopback().ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.ListenAddress, err)
	}
	// Tokens are asked of the cluster (TokenReview). Its ConfigMap
	// kube-system/extension-apiserver-authentication, where a cluster has
	// one, adds its client CA (people whose kubeconfig holds a certificate)
	// and its front proxy's; a cluster without one (another home's embedded
	// API server) leaves tokens alone.
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = o.Kubeconfig
	authn.TolerateInClusterLookupFailure = true
	if err := authn.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("delegate authentication to the cluster of %s (TokenReview): %w", o.Kubeconfig, err)
	}
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = o.Kubeconfig
	if err := authz.ApplyTo(&cfg.Authorization); err != nil {
		return nil, fmt.Errorf("delegate authorization to the cluster of %s (SubjectAccessReview): %w", o.Kubeconfig, err)
	}

	srv, err := cfg.Complete(nil).New("invisible-dots-dots-api", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("create the Dots API's server: %w", err)
	}
	for _, m := range o.Mounts {
		if !strings.HasPrefix(m.Prefix, "/") || !strings.HasSuffix(m.Prefix, "/") {
			return nil, fmt.Errorf("mount prefix %q must begin and end with a slash", m.Prefix)
		}
		h, err := m.New(o.Cluster, cfg.Authorization.Authorizer)
		if err != nil {
			return nil, fmt.Errorf("make the handler of %s: %w", m.Prefix, err)
		}
		srv.Handler.NonGoRestfulMux.HandlePrefix(m.Prefix, h)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d := &Delegated{URL: "https://" + clientHostPort(host, portText), CA: ca, done: make(chan struct{}), cancel: cancel}
	prepared := srv.PrepareRun()
	go func() {
		defer close(d.done)
		d.err = prepared.RunWithContext(runCtx)
	}()
	if err := d.waitReady(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	o.Log.Info("Dots API ready, authentication and authorization delegated to the cluster", "address", d.URL, "kubeconfig", o.Kubeconfig)
	return d, nil
}

// clientHostPort is where a client on this machine reaches a listener on
// host: an unspecified address is reached on the loopback.
func clientHostPort(host, port string) string {
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// waitReady waits until /readyz answers over TLS with the CA (it is always
// allowed, so no credential is needed).
func (d *Delegated) waitReady(ctx context.Context) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(d.CA) {
		return errors.New("the CA file holds no certificate")
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return fmt.Errorf("the Dots API's server stopped while starting: %w", d.err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz answered %s", resp.Status)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the Dots API's server at %s did not become ready: %v", d.URL, last)
}

// Done is closed when the server has stopped.
func (d *Delegated) Done() <-chan struct{} { return d.done }

// Err is why the server stopped, once Done is closed.
func (d *Delegated) Err() error { return d.err }

// Stop ends the server and waits for it (the requests in flight, streams
// excepted, are let finish).
func (d *Delegated) Stop() {
	d.cancel()
	<-d.done
}
