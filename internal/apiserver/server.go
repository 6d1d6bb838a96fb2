// Package apiserver embeds the upstream Kubernetes generic control plane
// (KEP-4080; the composition of k8s.io/kubernetes' samples/generic/server)
// on kine over PostgreSQL, with the garbage collector and the namespace
// controller running in the same process.
package apiserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/renameio/v2"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/controlplane"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	"k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"

	"github.com/invisible-dots/invisible-dots/internal/objectsize"
	"github.com/invisible-dots/invisible-dots/internal/upstreamlog"
)

// AdminUser is the user the API token authenticates as. It is in
// system:masters, so RBAC lets it do everything; other people get their own
// tokens and roles.
const (
	AdminUser  = "invisible-dots-admin"
	AdminGroup = "system:masters"
)

// MinTokenLength is the shortest API token accepted (DESIGN.md 2).
const MinTokenLength = 16

// Options is everything the embedded API server needs. The caller (the server
// command) owns the home layout; this package only writes the files the
// upstream flags want under StateDir.
type Options struct {
	// ListenAddress is host:port of the HTTPS endpoint.
	ListenAddress string
	// PKIDir holds the CA, the serving certificate and the service account key.
	PKIDir string
	// StateDir is a private directory for the generated token and encryption
	// configuration files the upstream options read.
	StateDir string
	// Token is the admin bearer token (config/api.token).
	Token string
	// EncryptionKey is the 32-byte key that encrypts Secrets at rest
	// (config/master.key).
	EncryptionKey []byte
	// KineDSN waits for the PostgreSQL database and gives its data source
	// in kine's form (no scheme). The API server is built while it waits
	// (see startKine).
	KineDSN func(context.Context) (string, error)
	// KineSocket is the unix socket kine serves the etcd API on.
	KineSocket string
	// EtcdServers, when set, stores the resources in these etcd servers
	// (URLs, as --etcd-servers takes them) instead of kine on PostgreSQL:
	// kine is not started and KineDSN and KineSocket are unused. It exists
	// to compare the product's store with upstream's (test/bench); the
	// product's store is kine on PostgreSQL.
	EtcdServers []string
	// Log receives the API server's and kine's log lines.
	Log logr.Logger
	// RequestTimeout replaces the upstream request timeout (60 s) when
	// set. Long-running requests (watches, Mount.LongRunning) escape it.
	RequestTimeout time.Duration
	// Admission plugins of the product, run after the upstream ones the
	// server keeps (NamespaceLifecycle).
	Admission []AdmissionPlugin
	// Profiling serves Go's pprof at /debug/pprof on the API port, to those
	// RBAC lets read the non-resource URL (the admin): the server command's
	// --profiling, for finding where a slow request's time goes.
	Profiling bool
	// Mounts are served on the API server's own port, behind its own filters
	// (authentication, authorization with RBAC's nonResourceURLs, audit,
	// in-flight limits): the Dots API.
	Mounts []Mount
}

// AdmissionPlugin is an admission plugin of the product, by name.
type AdmissionPlugin struct {
	Name   string
	Plugin admission.Interface
}

// Mount is a handler of a non-resource path prefix.
type Mount struct {
	// Prefix is the path prefix it serves, ending in a slash.
	Prefix string
	// New makes the handler once the server's pieces exist: a privileged
	// loopback client configuration (JSON, for our kinds) and the server's
	// own authorizer, for the checks a path alone cannot express.
	New func(loopback *rest.Config, authz authorizer.Authorizer) (http.Handler, error)
	// LongRunning says which of its paths are long-running requests (a
	// stream), as watches are: the server's request timeout does not end
	// them, and the in-flight limit does not count them. Nil: none.
	LongRunning func(path string) bool
}

// Server is a running embedded control plane.
type Server struct {
	// Loopback is a privileged client configuration that talks to the server
	// in process, used by the controllers.
	Loopback *rest.Config
	// CAFile is the CA that signed the serving certificate.
	CAFile string

	kine     *kine // nil when the resources are in an external etcd
	builtins *builtinControllers
	runCtx   context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	log      logr.Logger
}

// enabledAPIs is every API group version the server serves; all others are
// turned off to save memory (DESIGN.md 2: the full set costs about 130 MiB
// more). Leases stay for controller-runtime's leader election on a real
// cluster path and for upstream controllers.
var enabledAPIs = []string{
	"api/all=false",
	"v1=true",
	"rbac.authorization.k8s.io/v1=true",
	"coordination.k8s.io/v1=true",
	"events.k8s.io/v1=true",
	"authentication.k8s.io/v1=true",
	"authorization.k8s.io/v1=true",
	"apiextensions.k8s.io/v1=true",
	"apiregistration.k8s.io/v1=true",
}

// uncachedResources are the resources the API server keeps no watch cache
// of, as kube-apiserver does (its DefaultWatchCacheSizes, which the generic
// control plane's options do not apply): Events, under both of their APIs.
// They are written by every controller, read by a person now and then, and
// live an hour: a cache of each would hold every Event of that hour twice,
// and list them all from the store at every start (5,400 Events after 1,800
// Dots came and went: two lists of a third of a second each, before the
// server was ready). Reads and watches of Events go to the store instead.
var uncachedResources = []string{"events#0", "events.events.k8s.io#0"}

// featureGates are the upstream feature gates the server sets otherwise
// than upstream's defaults.
var featureGates = map[string]bool{
	// Every 5 minutes the watch cache's consistency checker reads every
	// object of every resource from the store and decodes it, to compare a
	// digest with the cache's (a check for bugs of the watch cache, which
	// only logs and counts what it finds). With 1000 Dots that is a read of
	// kine's whole table per resource and tens of MiB of heap each time, on
	// a server that is otherwise idle.
	"DetectCacheInconsistency": false,
}

// Start brings up kine (unless EtcdServers names another store) and the API
// server and returns once /readyz answers.
// The server runs until Stop is called: ctx bounds the start alone. A
// signal ends the controllers first, and they still talk to the API server
// as they stop (the leader Lease's release, a heartbeat in flight); the
// server stops after them (controlplane.Stop).
func Start(ctx context.Context, o Options) (*Server, error) {
	if len(o.Token) < MinTokenLength {
		return nil, fmt.Errorf("the API token is shorter than %d characters", MinTokenLength)
	}
	if len(o.EncryptionKey) != 32 {
		return nil, fmt.Errorf("the master key must be 32 bytes, got %d", len(o.EncryptionKey))
	}
	host, port, err := net.SplitHostPort(o.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("listen address %q is not host:port: %w", o.ListenAddress, err)
	}
	// The upstream server logs every controller's start and stop at info;
	// those show at -v 1 and up. Errors always show, but for two a healthy
	// server logs: at every start, no metric's labels are limited here, and
	// it then looks for an allow-list file that was never given
	// (k8s.io/component-base/metrics, Apply); at a home's first start, its
	// identity Lease is asked for before the system namespaces are made,
	// and is made at the next try.
	klog.SetLogger(upstreamlog.Quiet(o.Log.WithName("apiserver"), 1,
		upstreamlog.NotError{Msg: "The manifest file is empty, ignoring."},
		upstreamlog.NotError{Msg: "Failed to ensure lease exists, will retry", Err: `namespaces "kube-system" not found`},
	).V(1))
	pki := PKI{Dir: o.PKIDir}
	if err := pki.Ensure(host); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.StateDir, err)
	}
	tokenFile, encryptionFile, err := writeAuthFiles(o.StateDir, o.Token, o.EncryptionKey)
	if err != nil {
		return nil, err
	}

	var k *kine
	store := o.EtcdServers
	if len(store) == 0 {
		if k, err = startKine(ctx, o.KineDSN, o.KineSocket); err != nil {
			return nil, err
		}
		store = []string{k.endpoint()}
	} else {
		o.Log.Info("resources are stored in an external etcd, not kine on PostgreSQL (for comparison only); kine is not started", "etcd", store)
	}
	ok := false
	defer func() {
		if !ok && k != nil {
			k.stop()
		}
	}()

	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates); err != nil {
		return nil, fmt.Errorf("set the API server's feature gates: %w", err)
	}
	opts := server.NewOptions()
	enabled := []string{"NamespaceLifecycle"}
	for _, p := range o.Admission {
		plugin := p.Plugin
		opts.Admission.GenericAdmission.Plugins.Register(p.Name, func(io.Reader) (admission.Interface, error) { return plugin, nil })
		opts.Admission.GenericAdmission.RecommendedPluginOrder = append(opts.Admission.GenericAdmission.RecommendedPluginOrder, p.Name)
		enabled = append(enabled, p.Name)
	}
	var fss cliflag.NamedFlagSets
	opts.AddFlags(&fss)
	args := []string{
		"--etcd-servers=" + strings.Join(store, ","),
		"--bind-address=" + host,
		"--secure-port=" + port,
		"--tls-cert-file=" + pki.ServingCert(),
		"--tls-private-key-file=" + pki.ServingKey(),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--encryption-provider-config=" + encryptionFile,
		"--service-account-issuer=https://invisible-dots.local",
		"--service-account-key-file=" + pki.ServiceAccountKey(),
		"--service-account-signing-key-file=" + pki.ServiceAccountKey(),
		"--runtime-config=" + strings.Join(enabledAPIs, ","),
		// Priority and fairness needs the flowcontrol API, which is off.
		"--enable-priority-and-fairness=false",
		"--enable-admission-plugins=" + strings.Join(enabled, ","),
		"--disable-admission-plugins=" + strings.Join(disabledAdmission(), ","),
		"--profiling=" + strconv.FormatBool(o.Profiling),
		"--storage-media-type=application/json",
		"--watch-cache-sizes=" + strings.Join(uncachedResources, ","),
	}
	if o.RequestTimeout > 0 {
		args = append(args, "--request-timeout="+o.RequestTimeout.String())
	}
	// The upstream flags are the documented way to configure the server; they
	// are parsed in process and never appear on a command line.
	merged := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	for _, fs := range fss.FlagSets {
		merged.AddFlagSet(fs)
	}
	if err := merged.Parse(args); err != nil {
		return nil, fmt.Errorf("configure the API server: %w", err)
	}
	completed, err := opts.Complete(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("complete API server options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("validate API server options: %w", utilerrors.NewAggregate(errs))
	}
	chain, authz, err := buildServerChain(completed, o.Mounts)
	if err != nil {
		return nil, err
	}
	prepared, err := chain.PrepareRun()
	if err != nil {
		return nil, fmt.Errorf("prepare the API server: %w", err)
	}
	// After the rest of the server is built: a mount's handler may wait
	// for the database, which starts meanwhile.
	if err := mount(chain, authz, o.Mounts); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{
		Loopback: jsonLoopback(chain.GenericAPIServer.LoopbackClientConfig),
		CAFile:   pki.CACert(),
		kine:     k,
		cancel:   cancel,
		done:     make(chan struct{}),
		log:      o.Log,
	}
	go func() {
		defer close(s.done)
		s.err = prepared.Run(runCtx)
	}()
	if err := s.waitReady(ctx); err != nil {
		cancel()
		<-s.done
		return nil, err
	}
	s.runCtx = runCtx
	ok = true
	return s, nil
}

// jsonLoopback is a copy of the upstream loopback configuration for our
// clients. The upstream loopback speaks protobuf, which CRD types do not
// implement; controllers and clients of our kinds need JSON. client-go's
// default rate would make tight loops crawl (DESIGN.md 2).
func jsonLoopback(upstream *rest.Config) *rest.Config {
	c := rest.CopyConfig(upstream)
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	c.QPS = 500
	c.Burst = 1000
	return c
}

// MaxRequestBodyBytes bounds a request's body, below what the resource
// store takes in one write: the API server's client of kine sends at most
// 2 MiB a message (etcd's client default), and an object is stored with its
// metadata and managed fields beside what the request held. Upstream's 3 MiB
// would let a Dot within every field's bound fail as a 500 with gRPC's text;
// this way it is a 413 that names the limit. A patch within it that grows
// an object past it is refused by the objectsize admission plugin, with the
// same bound.
const MaxRequestBodyBytes = objectsize.MaxBytes

// buildServerChain composes aggregator -> generic control plane ->
// apiextensions -> not found, like the upstream generic sample, with one
// difference: apiextensions is told it is the only API server (master count
// 1), so a new CRD is Established at once instead of after five seconds.
// The mounts are served by the aggregator, the head of the chain, whose
// handler runs the server's filters before its mux.
func buildServerChain(opts options.CompletedOptions, mounts []Mount) (*aggregatorapiserver.APIAggregator, authorizer.Authorizer, error) {
	resources := controlplane.DefaultGenericAPIResourceConfigSource()
	genericConfig, informers, storageFactory, err := controlplaneapiserver.BuildGenericConfig(
		opts,
		[]*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		resources,
		servedDefinitions(generatedopenapi.GetOpenAPIDefinitions, enabledIn(resources),
			legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme),
		nil,
	)
	if err != nil {
		return nil, nil, fmt.Errorf("build the API server configuration: %w", err)
	}
	// Before the configurations below copy it: every server of the chain
	// builds its filters from it.
	genericConfig.LongRunningFunc = withLongRunningMounts(genericConfig.LongRunningFunc, mounts)
	genericConfig.MaxRequestBodyBytes = MaxRequestBodyBytes
	resolver := webhook.NewDefaultServiceResolver()
	cpConfig, initializers, err := controlplaneapiserver.CreateConfig(opts, genericConfig, informers, nil, storageFactory, resolver, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("build the control plane configuration: %w", err)
	}
	authResolver := webhook.NewDefaultAuthenticationInfoResolverWrapper(cpConfig.ProxyTransport, cpConfig.Generic.EgressSelector, cpConfig.Generic.LoopbackClientConfig, cpConfig.Generic.TracerProvider)
	const masterCount = 1
	extConfig, err := controlplaneapiserver.CreateAPIExtensionsConfig(*cpConfig.Generic, cpConfig.VersionedInformers, initializers, opts, masterCount, resolver, authResolver)
	if err != nil {
		return nil, nil, fmt.Errorf("build the apiextensions configuration: %w", err)
	}
	aggConfig, err := controlplaneapiserver.CreateAggregatorConfig(*cpConfig.Generic, opts, cpConfig.VersionedInformers, resolver, cpConfig.ProxyTransport, cpConfig.Extra.PeerProxy, initializers)
	if err != nil {
		return nil, nil, fmt.Errorf("build the aggregator configuration: %w", err)
	}
	aggConfig.ExtraConfig.DisableRemoteAvailableConditionController = true

	notFound := notfoundhandler.New(cpConfig.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	ext, err := extConfig.Complete().New(genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, nil, fmt.Errorf("create the apiextensions server: %w", err)
	}
	crdEnabled := extConfig.GenericConfig.MergedResourceConfig.ResourceEnabled(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	// The default RBAC policy is reconciled by our hook around upstream's
	// (rbacbootstrap.go), which a warm start does not wait for.
	cpConfig.Generic.DisabledPostStartHooks.Insert(rbacrest.PostStartHookName)
	cpCompleted := cpConfig.Complete()
	native, err := cpCompleted.New("invisible-dots", ext.GenericAPIServer)
	if err != nil {
		return nil, nil, fmt.Errorf("create the control plane server: %w", err)
	}
	rbacHook, err := rbacBootstrapHook()
	if err != nil {
		return nil, nil, err
	}
	if err := native.GenericAPIServer.AddPostStartHook(rbacBootstrapHookName, rbacHook); err != nil {
		return nil, nil, fmt.Errorf("add the RBAC bootstrap hook: %w", err)
	}
	client, err := kubernetes.NewForConfig(cpCompleted.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, nil, err
	}
	providers, err := cpCompleted.GenericStorageProviders(client.Discovery())
	if err != nil {
		return nil, nil, fmt.Errorf("create storage providers: %w", err)
	}
	if err := native.InstallAPIs(providers...); err != nil {
		return nil, nil, fmt.Errorf("install the built-in APIs: %w", err)
	}
	agg, err := controlplaneapiserver.CreateAggregatorServer(aggConfig.Complete(), native.GenericAPIServer, ext.Informers.Apiextensions().V1().CustomResourceDefinitions(), crdEnabled, controlplaneapiserver.DefaultGenericAPIServicePriorities())
	if err != nil {
		return nil, nil, fmt.Errorf("create the aggregator: %w", err)
	}
	for _, m := range mounts {
		if !strings.HasPrefix(m.Prefix, "/") || !strings.HasSuffix(m.Prefix, "/") {
			return nil, nil, fmt.Errorf("mount prefix %q must begin and end with a slash", m.Prefix)
		}
	}
	return agg, genericConfig.Authorization.Authorizer, nil
}

// mount makes the mounts' handlers and serves them at their prefixes, from
// the head of the chain (the server's filters run before them).
func mount(agg *aggregatorapiserver.APIAggregator, authz authorizer.Authorizer, mounts []Mount) error {
	g := agg.GenericAPIServer
	for _, m := range mounts {
		h, err := m.New(jsonLoopback(g.LoopbackClientConfig), authz)
		if err != nil {
			return fmt.Errorf("make the handler of %s: %w", m.Prefix, err)
		}
		g.Handler.NonGoRestfulMux.HandlePrefix(m.Prefix, h)
	}
	return nil
}

// withLongRunningMounts adds the mounts' long-running paths to the upstream
// check (watches, proxy, exec...). A long-running request escapes the
// request timeout (WithTimeoutForNonLongRunningRequests and the request's
// deadline, 60 s), the in-flight limit and the wait for requests in flight
// at shutdown; the server's http.Server has no WriteTimeout, so nothing
// else cuts it.
func withLongRunningMounts(upstream apirequest.LongRunningRequestCheck, mounts []Mount) apirequest.LongRunningRequestCheck {
	return func(r *http.Request, ri *apirequest.RequestInfo) bool {
		if upstream != nil && upstream(r, ri) {
			return true
		}
		if ri == nil || ri.IsResourceRequest {
			return false
		}
		for _, m := range mounts {
			if m.LongRunning != nil && strings.HasPrefix(ri.Path, m.Prefix) && m.LongRunning(ri.Path) {
				return true
			}
		}
		return false
	}
}

// disabledAdmission is every admission plugin the generic sample turns on,
// except NamespaceLifecycle: the others (webhooks, policies, quotas,
// certificates, service accounts) watch API groups this server does not serve.
func disabledAdmission() []string {
	opts := server.NewOptions()
	all := sets.New(opts.Admission.GenericAdmission.Plugins.Registered()...)
	on := all.Difference(opts.Admission.GenericAdmission.DefaultOffPlugins)
	on.Delete("NamespaceLifecycle")
	return sets.List(on)
}

// writeAuthFiles writes the two files the upstream options read: the static
// token file (one admin line) and the encryption configuration (aes-gcm for
// Secrets with the master key). Both are secret and go in a private directory.
func writeAuthFiles(dir, token string, key []byte) (tokenFile, encryptionFile string, err error) {
	if strings.ContainsAny(token, ",\"\n\r") {
		return "", "", errors.New("the API token may not contain commas, quotes or line breaks")
	}
	tokenFile = filepath.Join(dir, "token-auth.csv")
	line := fmt.Sprintf("%s,%s,%s,%q\n", token, AdminUser, AdminUser, AdminGroup)
	if err := writePrivate(tokenFile, []byte(line)); err != nil {
		return "", "", err
	}
	encryptionFile = filepath.Join(dir, "encryption.yaml")
	conf := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - name: master-1
        secret: ` + base64.StdEncoding.EncodeToString(key) + `
  - identity: {}
`
	if err := writePrivate(encryptionFile, []byte(conf)); err != nil {
		return "", "", err
	}
	return tokenFile, encryptionFile, nil
}

// writePrivate replaces path with data, atomically, readable by the server's
// user only.
func writePrivate(path string, data []byte) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithPermissions(0o600))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(s.Loopback)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-s.done:
			return false, fmt.Errorf("the API server stopped while starting: %w", s.err)
		case <-s.kineFailed():
			return false, s.kine.err()
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("%w: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("the API server did not become ready: %w (last: %v)", err, last)
	}
	return err
}

// kineFailed is closed when kine's store could not be opened; nil (never)
// when kine is not started.
func (s *Server) kineFailed() <-chan struct{} {
	if s.kine == nil {
		return nil
	}
	return s.kine.failed()
}

// Done is closed when the API server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is why the API server stopped, once Done is closed.
func (s *Server) Err() error { return s.err }

// StartBuiltinControllers starts the garbage collector and the namespace
// controller. Call it after the CRDs are Established: the collector watches
// the resources discovery lists at its start, and would otherwise see ours
// only at its next 30-second resync.
func (s *Server) StartBuiltinControllers() error {
	if s.builtins != nil {
		return nil
	}
	b, err := startBuiltinControllers(s.runCtx, s.Loopback)
	if err != nil {
		return err
	}
	s.builtins = b
	return nil
}

// Stop stops the built-in controllers, then the API server, then kine (when
// it runs), and waits for each.
func (s *Server) Stop() {
	if s.builtins != nil {
		s.builtins.stop()
	}
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		// Requests still in flight (a client that does not stop) must not
		// keep the process from stopping: kine and the database go next.
		s.log.Error(nil, "the API server did not stop in time; stopping its storage anyway", "after", stopTimeout)
	}
	if s.kine != nil {
		s.kine.stop()
	}
}

// stopTimeout bounds the API server's own stop.
const stopTimeout = 15 * time.Second
