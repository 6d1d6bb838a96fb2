package controlplane

import (
	"fmt"
	"path/filepath"

	"github.com/google/renameio/v2"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// contextName names the cluster, user and context of the kubeconfig.
const contextName = "invisible-dots"

// Kubeconfig returns the admin kubeconfig for server (https://host:port),
// trusting caPEM and authenticating with token.
func Kubeconfig(server string, caPEM []byte, token string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName, Namespace: "default"}
	cfg.CurrentContext = contextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encode kubeconfig: %w", err)
	}
	return data, nil
}

// writeKubeconfig writes the kubeconfig with mode 0600, replacing it
// atomically so a reader never sees half a file.
func writeKubeconfig(path string, data []byte) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
