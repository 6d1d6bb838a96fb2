package dotsapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

func TestGetMCPSecrets(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	path := wire.MCPSecretsPath(mcpDot.Namespace, mcpDot.Name)
	got, _, body := e.get(t, "viewer", path, nil)
	if got.Status != http.StatusOK {
		t.Fatalf("GET %s as the viewer: %+v", path, got)
	}
	if strings.Contains(string(body), mcpSetValue) || strings.Contains(string(body), "sk-or-own") {
		t.Errorf("the answer %s holds a value", body)
	}
	var list wire.MCPSecrets
	if err := jsonUnmarshalStrict(body, &list); err != nil {
		t.Fatal(err)
	}
	want := []wire.MCPSecret{
		{Server: "time", Name: "TIME_API_KEY", Set: true},
		{Server: "time", Name: "TIME_REGION", Set: false},
		{Server: "search", Name: "Authorization", Set: false},
	}
	if diff := cmp.Diff(want, list.Secrets); diff != "" || list.Dot.Name != mcpDot.Name {
		t.Errorf("secrets of %+v -want +got:\n%s", list.Dot, diff)
	}
	for _, tc := range []struct {
		reason, who, path string
		want              answer
	}{
		{"someone without a role may not see them", "nobody", path, answer{http.StatusForbidden, wire.CodeForbidden, "may not get dots/mcp-secrets"}},
		{"a Dot that does not exist", "viewer", wire.MCPSecretsPath("team-a", "ghost"), answer{http.StatusNotFound, wire.CodeNotFound, "no Dot ghost"}},
	} {
		if got, _, _ := e.get(t, tc.who, tc.path, nil); !got.matches(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.reason, got, tc.want)
		}
	}
	// A Dot without MCP servers, or without a Secret, lists what it names.
	editor, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	none, err := editor.MCPSecrets(context.Background(), runningDot.Namespace, runningDot.Name)
	if err != nil || none.Secrets == nil || len(none.Secrets) != 0 {
		t.Errorf("MCPSecrets of a Dot without servers = %+v, %v; want an empty list", none, err)
	}
}

func TestPutAndDeleteMCPSecret(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	secretOf := func() map[string]string {
		t.Helper()
		sec := &corev1.Secret{}
		if err := e.client.Get(ctx, types.NamespacedName{Namespace: mcpDot.Namespace, Name: mcpSecretName}, sec); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range sec.Data {
			out[k] = string(v)
		}
		return out
	}
	announced := func() string {
		t.Helper()
		d := &dotsv1.Dot{}
		if err := e.client.Get(ctx, mcpDot, d); err != nil {
			t.Fatal(err)
		}
		return d.Annotations[dotsv1.SecretsChangedAnnotation]
	}
	before := secretOf()
	const badValue = "tab\there"
	put := func(server, name string) string {
		return wire.MCPSecretPath(mcpDot.Namespace, mcpDot.Name, server, name)
	}
	for _, tc := range []struct {
		reason, who, method, path, body string
		want                            answer
	}{
		{"the viewer may not write a secret", "viewer", http.MethodPut, put("time", "TIME_REGION"), `{"value":"eu"}`,
			answer{http.StatusForbidden, wire.CodeForbidden, `user "vera" may not update dots/mcp-secrets of "team-a/mcp"`}},
		{"the viewer may not clear a secret", "viewer", http.MethodDelete, put("time", "TIME_API_KEY"), ``,
			answer{http.StatusForbidden, wire.CodeForbidden, "may not delete dots/mcp-secrets"}},
		{"someone without a role may not write one", "nobody", http.MethodPut, put("time", "TIME_REGION"), `{"value":"eu"}`,
			answer{http.StatusForbidden, wire.CodeForbidden, "nora"}},
		{"a secret the config does not name is not stored", "editor", http.MethodPut, put("time", "UNNAMED"), `{"value":"x"}`,
			answer{http.StatusNotFound, wire.CodeNotFound, `names no secret "UNNAMED" of an MCP server "time"`}},
		{"a server the config does not have", "editor", http.MethodPut, put("weather", "TIME_API_KEY"), `{"value":"x"}`,
			answer{http.StatusNotFound, wire.CodeNotFound, `MCP server "weather"`}},
		{"a secret the config does not name is not cleared", "editor", http.MethodDelete, put("search", "Cookie"), ``,
			answer{http.StatusNotFound, wire.CodeNotFound, `names no secret "Cookie"`}},
		{"a value that breaks the MCP secret rule, never repeated", "editor", http.MethodPut, put("time", "TIME_REGION"), `{"value":"` + "tab\\there" + `"}`,
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, protocol.MCPSecretRule}},
		{"an empty value breaks the rule too", "editor", http.MethodPut, put("time", "TIME_REGION"), `{"value":""}`,
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, protocol.MCPSecretRule}},
		{"an unknown field", "editor", http.MethodPut, put("time", "TIME_REGION"), `{"val":"x"}`,
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "val"`}},
		{"a name that cannot be a key of a Secret", "editor", http.MethodPut, put("time", "A B"), `{"value":"x"}`,
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, "cannot be stored"}},
		{"a Dot that does not exist", "editor", http.MethodPut, wire.MCPSecretPath("team-a", "ghost", "time", "X"), `{"value":"x"}`,
			answer{http.StatusNotFound, wire.CodeNotFound, "no Dot ghost"}},
		{"the list is read only", "editor", http.MethodPut, wire.MCPSecretsPath(mcpDot.Namespace, mcpDot.Name), `{"value":"x"}`,
			answer{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "does not take PUT"}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			got, _ := e.call(t, tc.who, tc.method, tc.path, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("%s %s as %s:\ngot  %+v\nwant %+v", tc.method, tc.path, tc.who, got, tc.want)
			}
			if strings.Contains(got.Message, badValue) || strings.Contains(got.Message, `tab\there`) {
				t.Errorf("the refusal %q repeats the value", got.Message)
			}
		})
	}
	if diff := cmp.Diff(before, secretOf()); diff != "" || announced() != "" {
		t.Errorf("refused writes changed the Secret (-before +after):\n%s\nor announced %q", diff, announced())
	}

	editor, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := editor.SetMCPSecret(ctx, mcpDot.Namespace, mcpDot.Name, "search", "Authorization", "Bearer new token")
	if err != nil || set != (wire.MCPSecret{Server: "search", Name: "Authorization", Set: true}) {
		t.Fatalf("SetMCPSecret = %+v, %v", set, err)
	}
	after := secretOf()
	if after["mcp.search.Authorization"] != "Bearer new token" || after["mcp.time.TIME_API_KEY"] != mcpSetValue || after[dotsv1.OpenRouterKeySecretKey] != "sk-or-own" {
		t.Errorf("the Secret holds %v keys; want the new secret beside the others", len(after))
	}
	first := announced()
	if first == "" {
		t.Errorf("the Dot was not annotated with the change: its host agent would push it only at its next poll")
	}
	if err := editor.ClearMCPSecret(ctx, mcpDot.Namespace, mcpDot.Name, "time", "TIME_API_KEY"); err != nil {
		t.Fatalf("ClearMCPSecret: %v", err)
	}
	if _, ok := secretOf()["mcp.time.TIME_API_KEY"]; ok {
		t.Errorf("the cleared secret is still in the Secret")
	}
	if again := announced(); again == "" || again == first {
		t.Errorf("the clear was not announced: %q after %q", again, first)
	}
	// Clearing what is not set is no error.
	if err := editor.ClearMCPSecret(ctx, mcpDot.Namespace, mcpDot.Name, "time", "TIME_REGION"); err != nil {
		t.Errorf("ClearMCPSecret of a secret not set: %v", err)
	}
	list, err := editor.MCPSecrets(ctx, mcpDot.Namespace, mcpDot.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.MCPSecret{
		{Server: "time", Name: "TIME_API_KEY", Set: false},
		{Server: "time", Name: "TIME_REGION", Set: false},
		{Server: "search", Name: "Authorization", Set: true},
	}
	if diff := cmp.Diff(want, list.Secrets); diff != "" {
		t.Errorf("after the writes -want +got:\n%s", diff)
	}
}

func TestMCPSecretOfADotWithoutSecret(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	// The running Dot names no server: give it one, with no Secret.
	d := &dotsv1.Dot{}
	if err := e.client.Get(ctx, runningDot, d); err != nil {
		t.Fatal(err)
	}
	d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "time", Command: "time-mcp", Secrets: []string{"TIME_API_KEY"}}}
	if err := e.client.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	editor, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	if err := editor.ClearMCPSecret(ctx, runningDot.Namespace, runningDot.Name, "time", "TIME_API_KEY"); err != nil {
		t.Fatalf("ClearMCPSecret without a Secret: %v", err)
	}
	if _, err := editor.SetMCPSecret(ctx, runningDot.Namespace, runningDot.Name, "time", "TIME_API_KEY", "k"); err != nil {
		t.Fatalf("SetMCPSecret: %v", err)
	}
	if err := e.client.Get(ctx, runningDot, d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.SecretRef == nil || d.Spec.SecretRef.Name != "runner-secrets" {
		t.Fatalf("spec.secretRef = %+v; want the Secret made for the Dot", d.Spec.SecretRef)
	}
	sec := &corev1.Secret{}
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: runningDot.Namespace, Name: "runner-secrets"}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["mcp.time.TIME_API_KEY"]) != "k" {
		t.Errorf("the Secret made holds %d keys; want the secret", len(sec.Data))
	}
}
