package controlplane

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// HostAgentRole is the generated ClusterRole every host agent is bound to,
// and the name of its Role in the system namespace.
const HostAgentRole = "invisible-dots-host-agent"

// HostSystemBindingName is the RoleBinding, in the system namespace, of a
// host's ServiceAccount to HostAgentRole's Role there. It carries no host
// access label: the host access controller keeps the bindings of the
// namespaces with Computers, and this one is not of them.
func HostSystemBindingName(host string) string { return "invisible-dots-host-" + host + "-system" }

// JoinHost makes the credential of host's agent and returns the kubeconfig
// it runs with: a ServiceAccount of its own in the system namespace (never
// system:masters), bound to HostAgentRole (its ClusterRole, and its Role in
// the system namespace, which reads the default OpenRouter key), and a token
// for it valid for ttl.
// In each namespace where the host has Computers, the control plane gives
// that ServiceAccount its Secrets (controllers.HostAccessReconciler), and
// nowhere else. Joining again makes a new token; the old one stays valid
// until it expires.
//
// admin is the kubeconfig of a person who may do this (the server's admin
// kubeconfig); the new one names the same API server and CA.
func JoinHost(ctx context.Context, admin clientcmdapi.Config, host string, ttl time.Duration) ([]byte, error) {
	cfg, err := clientcmd.NewDefaultClientConfig(admin, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("read the admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	sa := hostidentity.ServiceAccount(host)
	ns := dotsv1.SystemNamespace
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns, Labels: map[string]string{hostidentity.AccessLabel: host}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the ServiceAccount %s/%s: %w", ns, sa, err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: hostidentity.AccessBindingName(host), Labels: map[string]string{hostidentity.AccessLabel: host}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: HostAgentRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the ServiceAccount %s/%s to %s: %w", ns, sa, HostAgentRole, err)
	}
	// The host agent's Role in the system namespace: get of the default
	// OpenRouter key's Secret, by name, and nothing else there.
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: HostSystemBindingName(host), Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: HostAgentRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the ServiceAccount %s/%s to the Role %s/%s: %w", ns, sa, ns, HostAgentRole, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("make a token for %s/%s: %w", ns, sa, err)
	}
	return tokenKubeconfig(admin, "invisible-dots-host-"+host, tr.Status.Token, "")
}

// tokenKubeconfig is a kubeconfig of the API server admin names, with token
// as its credential, its context called name and set to namespace (none when
// empty).
func tokenKubeconfig(admin clientcmdapi.Config, name, token, namespace string) ([]byte, error) {
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	out := clientcmdapi.NewConfig()
	out.Clusters[name] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData, CertificateAuthority: cluster.CertificateAuthority}
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: namespace}
	out.CurrentContext = name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, fmt.Errorf("encode the kubeconfig: %w", err)
	}
	return data, nil
}
