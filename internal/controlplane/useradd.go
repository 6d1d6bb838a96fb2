package controlplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// PersonRoles maps the roles a person is given with `user add` to the
// ClusterRoles of config/rbac/people_roles.yaml, which the server installs.
var PersonRoles = map[string]string{"editor": "dots-editor", "viewer": "dots-viewer"}

// UserLabel marks what `user add` made for a person, with the person's name.
const UserLabel = "dots.invisible.dev/user"

// AddUser gives a person a credential of their own on the API server admin
// names, for one namespace: a ServiceAccount NAME there (the namespace is
// made if it is missing), a RoleBinding there to the ClusterRole of role
// (PersonRoles), and a token valid for ttl. It returns the kubeconfig, its
// context set to the namespace, and when the token expires. Adding the same
// person again makes a new token (the old one stays valid until it
// expires); deleting the ServiceAccount revokes every token of it.
func AddUser(ctx context.Context, admin clientcmdapi.Config, name, namespace, role string, ttl time.Duration) ([]byte, time.Time, error) {
	clusterRole, ok := PersonRoles[role]
	if !ok {
		return nil, time.Time{}, fmt.Errorf("role %q is neither editor nor viewer", role)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, time.Time{}, fmt.Errorf("user name %q: %s (use lowercase letters, digits and -)", name, errs[0])
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, time.Time{}, fmt.Errorf("namespace %q: %s", namespace, errs[0])
	}
	cfg, err := clientcmd.NewDefaultClientConfig(admin, nil).ClientConfig()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, time.Time{}, err
	}
	labels := map[string]string{UserLabel: name}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, time.Time{}, fmt.Errorf("create the namespace %s: %w", namespace, err)
	}
	sa, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		sa, err = cs.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("create the ServiceAccount %s/%s: %w", namespace, name, err)
	}
	// The binding is the account's: deleting the account (which revokes
	// its tokens) deletes the binding too, through the garbage collector,
	// so a later account of the same name starts with no right.
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole + "-" + name, Namespace: namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{owner}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	_, err = cs.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier version, or for an account since made
		// again: the binding follows this account.
		var old *rbacv1.RoleBinding
		if old, err = cs.RbacV1().RoleBindings(namespace).Get(ctx, binding.Name, metav1.GetOptions{}); err == nil &&
			!slices.ContainsFunc(old.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == sa.UID }) {
			old.OwnerReferences = []metav1.OwnerReference{owner}
			_, err = cs.RbacV1().RoleBindings(namespace).Update(ctx, old, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("bind %s/%s to %s: %w", namespace, name, clusterRole, err)
	}
	// The API server's authorizer learns of a new binding a moment later;
	// the person's first command must not meet a 403 for it.
	WaitUntilAllowed(ctx, cs, serviceaccount.MakeUsername(namespace, name), authorizationv1.ResourceAttributes{
		Namespace: namespace, Verb: "get", Group: dotsv1.GroupVersion.Group, Resource: "dots",
	})
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("make a token for %s/%s: %w", namespace, name, err)
	}
	data, err := tokenKubeconfig(admin, "invisible-dots-"+namespace+"-"+name, tr.Status.Token, namespace)
	return data, tr.Status.ExpirationTimestamp.Time, err
}

// WaitUntilAllowed waits, up to 15 s, until the API server's authorizer lets
// user do what attrs say (a SubjectAccessReview): a binding just made takes
// effect once the authorizer's informers have it. It gives up quietly: the
// binding is made, and takes effect however long that takes.
func WaitUntilAllowed(ctx context.Context, cs kubernetes.Interface, user string, attrs authorizationv1.ResourceAttributes) {
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, nil
	})
}
