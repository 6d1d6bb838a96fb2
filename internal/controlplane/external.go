package controlplane

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/apiserver"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// startExternal runs the control plane against the cluster of
// o.ExternalKubeconfig: our kinds and roles installed there, and the Dots
// API, which that cluster's API server does not serve, on our own HTTPS port
// (o.ListenAddress) with authentication and authorization asked of the
// cluster, published in the ConfigMap clients look for.
func (cp *ControlPlane) startExternal(ctx context.Context, o Options, mounts []apiserver.Mount) error {
	var err error
	cp.Config, err = clientcmd.BuildConfigFromFlags("", o.ExternalKubeconfig)
	if err != nil {
		return fmt.Errorf("read --kubeconfig %s: %w", o.ExternalKubeconfig, err)
	}
	cp.Config.QPS, cp.Config.Burst = 100, 200
	if err := ApplyCRDs(ctx, cp.Config); err != nil {
		// A controller's own credential (config/default's ServiceAccount)
		// may not write CRDs: whoever applied config/default installed
		// them, and they are used as they are.
		if missing := missingKinds(cp.Config); !apierrors.IsForbidden(err) || len(missing) > 0 {
			return fmt.Errorf("install the CRDs on the cluster of %s (or apply config/default with kubectl first): %w", o.ExternalKubeconfig, err)
		}
		cp.log.Info("the CRDs are installed already and this credential may not update them; after an upgrade, apply config/default again", "kubeconfig", o.ExternalKubeconfig)
	}
	if err := InstallSystem(ctx, cp.Config); err != nil {
		// A controller's credential may rightly lack the right to make
		// namespaces and ClusterRoles: config/default makes them.
		cp.log.Error(err, "could not install the system namespace and the roles; apply config/default with kubectl if they are missing", "kubeconfig", o.ExternalKubeconfig)
	}
	cp.DotsAPI, err = apiserver.StartDelegated(ctx, apiserver.DelegatedOptions{
		ListenAddress: o.ListenAddress,
		PKIDir:        o.Home.PKI(),
		Kubeconfig:    o.ExternalKubeconfig,
		Cluster:       cp.Config,
		Mounts:        mounts,
		Log:           cp.log,
	})
	if err != nil {
		return fmt.Errorf("serve the Dots API on %s: %w", o.ListenAddress, err)
	}
	if err := publishDotsAPI(ctx, cp.Config, cp.DotsAPI.URL, cp.DotsAPI.CA); err != nil {
		return fmt.Errorf("publish where the Dots API is (the ConfigMap %s/%s; config/rbac/dots_api_discovery.yaml lets the server write it): %w",
			dotsv1.SystemNamespace, wire.DiscoveryConfigMap, err)
	}
	cp.log.Info("control plane ready against an external cluster", "kubeconfig", o.ExternalKubeconfig, "dotsAPI", cp.DotsAPI.URL)
	return nil
}

// publishDotsAPI writes the discovery ConfigMap: where the Dots API is and
// the CA of its certificate.
func publishDotsAPI(ctx context.Context, cfg *rest.Config, url string, ca []byte) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cm := corev1ac.ConfigMap(wire.DiscoveryConfigMap, dotsv1.SystemNamespace).
		WithData(map[string]string{wire.DiscoveryServerKey: url, wire.DiscoveryCAKey: string(ca)})
	_, err = cs.CoreV1().ConfigMaps(dotsv1.SystemNamespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	return err
}

// DotsAPIConfig is the client configuration of the Dots API with the
// control plane's own credential: Config itself where the API server serves
// it (the embedded one).
func (cp *ControlPlane) DotsAPIConfig() *rest.Config {
	if cp.DotsAPI == nil {
		return cp.Config
	}
	return dotsclient.ConfigAt(cp.Config, cp.DotsAPI.URL, cp.DotsAPI.CA)
}

// missingKinds lists the resources of our kinds the cluster does not serve
// (discovery, open to every authenticated user); all of them when it
// cannot tell.
func missingKinds(cfg *rest.Config) []string {
	want := []string{"dots", "computers", "tasks", "approvals", "hosts"}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return want
	}
	list, err := dc.ServerResourcesForGroupVersion(dotsv1.GroupVersion.String())
	if err != nil {
		return want
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	var missing []string
	for _, name := range want {
		if !served[name] {
			missing = append(missing, name)
		}
	}
	return missing
}
