package dotsapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

func TestPutOpenRouterKey(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	const path = "/dots/v1/secrets/openrouter"
	const key = "sk-or-v1-abcdef0123456789"
	for _, tc := range []struct {
		reason string
		who    string
		body   string
		want   answer
	}{
		{"someone who may not write the Secret", "editor", `{"key":"` + key + `"}`, answer{http.StatusForbidden, wire.CodeForbidden, "may not update secrets"}},
		{"a key with a space", "admin", `{"key":"sk-or nope-secretvalue"}`, answer{http.StatusBadRequest, wire.CodeInvalidRequest, ""}},
		{"no key", "admin", `{"key":""}`, answer{http.StatusBadRequest, wire.CodeInvalidRequest, "no key"}},
		{"an unknown field", "admin", `{"key":"` + key + `","dot":"x"}`, answer{http.StatusBadRequest, wire.CodeInvalidRequest, ""}},
	} {
		got, body := e.call(t, tc.who, http.MethodPut, path, "application/json", tc.body)
		if !got.matches(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.reason, got, tc.want)
		}
		if strings.Contains(string(body), "nope-secretvalue") || strings.Contains(string(body), key) {
			t.Errorf("%s: the answer repeats the key: %s", tc.reason, body)
		}
	}
	sec := &corev1.Secret{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, sec); err == nil {
		t.Fatalf("a refused request stored a key")
	}

	// The Dot with a key of its own runs too: it keeps its own key.
	own := &dotsv1.Dot{}
	if err := e.client.Get(context.Background(), mcpDot, own); err != nil {
		t.Fatal(err)
	}
	ownComputer := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: mcpDot.Namespace, Name: mcpDot.Name,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(own, dotsv1.GroupVersion.WithKind("Dot"))}}}
	ownComputer.Status.State = dotsv1.ComputerRunning
	if err := e.client.Create(context.Background(), ownComputer); err != nil {
		t.Fatal(err)
	}

	got, body := e.call(t, "admin", http.MethodPut, path, "application/json", `{"key":"`+key+`\n"}`)
	if got.Status != http.StatusOK || strings.Contains(string(body), key) {
		t.Fatalf("store: %+v %s", got, body)
	}
	var out OpenRouterKeyStored
	if err := json.Unmarshal(body, &out); err != nil || !out.Created || out.Secret != dotsv1.SystemNamespace+"/"+dotsv1.DefaultKeySecretName {
		t.Errorf("answer %s (%v)", body, err)
	}
	// Running with no key of their own: the runner, the booting one and the
	// one on another host; not the sleeper, nor the one with its own key.
	if out.RunningDots == nil || *out.RunningDots != 3 {
		t.Errorf("answer %s: want running_dots 3", body)
	}
	for _, d := range []struct {
		key       types.NamespacedName
		announced bool
	}{{runningDot, true}, {bootingDot, true}, {remoteDot, true}, {stoppedDot, false}, {mcpDot, false}, {unplacedDot, false}} {
		dot := &dotsv1.Dot{}
		if err := e.client.Get(context.Background(), d.key, dot); err != nil {
			t.Fatal(err)
		}
		if got := dot.Annotations[dotsv1.SecretsChangedAnnotation] != ""; got != d.announced {
			t.Errorf("Dot %s told of the new key: %v, want %v (its host agent pushes it at once)", d.key, got, d.announced)
		}
	}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[dotsv1.OpenRouterKeySecretKey]) != key {
		t.Errorf("the Secret holds %d bytes, not the key less its line end", len(sec.Data[dotsv1.OpenRouterKeySecretKey]))
	}
	// The health now says a key is stored.
	_, _, hb := e.get(t, "viewer", wire.Prefix+"health", nil)
	var health wire.Health
	if err := json.Unmarshal(hb, &health); err != nil || !health.OpenRouterConfigured {
		t.Errorf("health after the store: %s", hb)
	}
}

// TestPutDotOpenRouterKey: under a Dot's path (ref 9.6's dot_id, here its
// namespace and name) the key is that Dot's own, stored by a person who may write the
// Dot's secrets, and the answer says whether its running computer got it.
func TestPutDotOpenRouterKey(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	const key = "sk-or-v1-fedcba9876543210"
	path := func(d types.NamespacedName) string {
		return "/dots/v1/namespaces/" + d.Namespace + "/dots/" + d.Name + "/secrets/openrouter"
	}
	body := `{"key":"` + key + `"}`
	for _, tc := range []struct {
		reason, who string
		dot         types.NamespacedName
		body        string
		want        answer
	}{
		{"a viewer of the Dot", "viewer", runningDot, body, answer{http.StatusForbidden, wire.CodeForbidden, ""}},
		{"a Dot of a namespace the editor has no role in", "editor", types.NamespacedName{Namespace: "team-b", Name: "runner"}, body, answer{http.StatusForbidden, wire.CodeForbidden, ""}},
		{"a Dot that does not exist", "editor", types.NamespacedName{Namespace: "team-a", Name: "ghost"}, body, answer{http.StatusNotFound, wire.CodeNotFound, ""}},
		{"an unknown field", "editor", runningDot, `{"key":"` + key + `","dot_id":"x"}`, answer{http.StatusBadRequest, wire.CodeInvalidRequest, ""}},
		{"a key with a space", "editor", runningDot, `{"key":"sk-or nope-secretvalue"}`, answer{http.StatusBadRequest, wire.CodeInvalidRequest, ""}},
	} {
		got, b := e.call(t, tc.who, http.MethodPut, path(tc.dot), "application/json", tc.body)
		if !got.matches(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.reason, got, tc.want)
		}
		if strings.Contains(string(b), key) || strings.Contains(string(b), "nope-secretvalue") {
			t.Errorf("%s: the answer repeats the key: %s", tc.reason, b)
		}
	}
	for _, d := range []struct {
		dot     types.NamespacedName
		running int
	}{{runningDot, 1}, {stoppedDot, 0}} {
		got, b := e.call(t, "editor", http.MethodPut, path(d.dot), "application/json", body)
		if got.Status != http.StatusOK || strings.Contains(string(b), key) {
			t.Fatalf("store the key of %s: %+v %s", d.dot, got, b)
		}
		var out OpenRouterKeyStored
		if err := json.Unmarshal(b, &out); err != nil || out.RunningDots == nil || *out.RunningDots != d.running {
			t.Errorf("the key of %s: answer %s (%v); want running_dots %d", d.dot, b, err, d.running)
		}
		dot := &dotsv1.Dot{}
		if err := e.client.Get(context.Background(), d.dot, dot); err != nil {
			t.Fatal(err)
		}
		if dot.Spec.SecretRef == nil || out.Secret != d.dot.Namespace+"/"+dot.Spec.SecretRef.Name {
			t.Fatalf("the key of %s went to %s; the Dot names %+v", d.dot, out.Secret, dot.Spec.SecretRef)
		}
		sec := &corev1.Secret{}
		if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: d.dot.Namespace, Name: dot.Spec.SecretRef.Name}, sec); err != nil {
			t.Fatal(err)
		}
		if string(sec.Data[dotsv1.OpenRouterKeySecretKey]) != key {
			t.Errorf("the Dot's Secret holds %d bytes, not the key", len(sec.Data[dotsv1.OpenRouterKeySecretKey]))
		}
		if dot.Annotations[dotsv1.SecretsChangedAnnotation] == "" {
			t.Errorf("Dot %s was not told of its new key (its host agent pushes it at once when told)", d.dot)
		}
	}
	def := &corev1.Secret{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, def); err == nil {
		t.Errorf("a Dot's key was stored as the host-wide default")
	}
}
