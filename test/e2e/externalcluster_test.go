package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// TestDotsAPIOnAnotherCluster: run against a cluster that is not its own
// (server --kubeconfig; here another home's embedded API server, which
// serves TokenReview and SubjectAccessReview as any cluster does), the
// server serves the Dots API on its own HTTPS port, asks that cluster who a
// caller is and what they may do, and publishes where it is; a person's own
// kubeconfig of that cluster and the same RBAC rules then work for the CLI
// and the Go client.
func TestDotsAPIOnAnotherCluster(t *testing.T) {
	cluster := launch(t, newHome(t), []string{"server", "--no-web", "--no-controllers"})
	cluster.waitReady()
	ourHome := newHome(t)
	ours := launch(t, ourHome, []string{"server", "--no-web", "--kubeconfig", cluster.kubeconfig()}, "INVISIBLE_DOTS_HOST=external-host")
	eventually(t, 2*time.Minute, "the server publishes its Dots API", func() error {
		if ours.exited(0) {
			t.Fatalf("the server exited:\n%s", ours.logTail(20))
		}
		_, err := cluster.kubectl("get", "configmap", "-n", "invisible-dots-system", wire.DiscoveryConfigMap)
		return err
	})
	if !strings.Contains(ours.logTail(200), "Dots API ready") {
		t.Fatalf("the server does not say where its Dots API is:\n%s", ours.logTail(40))
	}
	cluster.mustKubectl("create", "namespace", "family")
	cluster.mustKubectl("apply", "-n", "family", "-f", sampleDot)

	personOf := func(name, role string) (string, *client.Client) {
		t.Helper()
		file := filepath.Join(filepath.Dir(ourHome), name+".kubeconfig")
		out, err := exec.Command(binary, "user", "add", name, "--namespace", "family", "--role", role,
			"--kubeconfig", cluster.kubeconfig(), "--output", file).CombinedOutput()
		if err != nil {
			t.Fatalf("user add %s: %v\n%s", name, err, out)
		}
		// The person is told how long the token lasts (the default, 30 days).
		if !regexp.MustCompile(`until \d{4}-\d\d-\d\dT[0-9:]+Z \(720h0m0s\)`).Match(out) {
			t.Errorf("user add %s printed %q; want the token's end and lifetime in it", name, out)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return file, c
	}
	ctx := context.Background()
	adaFile, ada := personOf("ada", "editor")
	bobFile, bob := personOf("bob", "viewer")

	t.Log("the editor's message is kept by our server, found through the cluster's ConfigMap")
	var accepted wire.MessageAccepted
	eventually(t, time.Minute, "the editor's message is accepted", func() error {
		var err error
		accepted, err = ada.PostMessage(ctx, "family", "fare-watch", "is the 9:40 on time?")
		return err
	})
	got, err := bob.Messages(ctx, "family", "fare-watch", wire.MessagesQuery{})
	if err != nil {
		t.Fatalf("the viewer reads the conversation: %v", err)
	}
	if len(got.Messages) == 0 || got.Messages[len(got.Messages)-1].EventID != accepted.EventID {
		t.Fatalf("the viewer reads %+v; want the editor's message %d", got.Messages, accepted.EventID)
	}
	health, err := bob.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if health.Home != ourHome {
		t.Errorf("the health names the home %q; want our server's %q (the cluster's own API server answered)", health.Home, ourHome)
	}

	t.Log("the cluster's RBAC decides: the viewer may not post, nobody may reach another namespace")
	if _, err := bob.PostMessage(ctx, "family", "fare-watch", "hello"); client.StatusOf(err) != http.StatusForbidden || client.CodeOf(err) != wire.CodeForbidden {
		t.Errorf("the viewer's post: %v; want 403 %s", err, wire.CodeForbidden)
	}
	if _, err := ada.Messages(ctx, "default", "fare-watch", wire.MessagesQuery{}); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("the editor's read of another namespace: %v; want 403", err)
	}
	if _, err := ada.IngestEvents(ctx, "external-host", "family", "fare-watch", "uid", nil); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a person on the host agents' routes: %v; want 403", err)
	}

	t.Log("a token the cluster does not know is refused")
	bad, err := clientcmd.BuildConfigFromFlags("", bobFile)
	if err != nil {
		t.Fatal(err)
	}
	bad.BearerToken = "not-a-token-of-this-cluster"
	badClient, err := client.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := badClient.Health(ctx); client.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("an unknown token, at the cluster: %v; want 401", err)
	}
	url := cluster.mustKubectl("get", "configmap", "-n", "invisible-dots-system", wire.DiscoveryConfigMap, "-o", "jsonpath={.data.server}")
	ca := cluster.mustKubectl("get", "configmap", "-n", "invisible-dots-system", wire.DiscoveryConfigMap, "-o", "jsonpath={.data.ca\\.crt}")
	direct, err := client.New(client.ConfigAt(bad, url, []byte(ca)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Health(ctx); client.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("an unknown token, at our server: %v; want 401", err)
	}

	t.Log("the command line, with the person's kubeconfig")
	run := func(kubeconfig string, args ...string) (string, error) {
		cmd := exec.Command(binary, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), "INVISIBLE_DOTS_HOME="+filepath.Join(filepath.Dir(ourHome), "nobody"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(bobFile, "logs", "fare-watch", "-n", "family"); err != nil || !strings.Contains(out, "is the 9:40 on time?") {
		t.Errorf("the viewer's logs: %v\n%s", err, out)
	}
	if out, err := run(adaFile, "files", "ls", "fare-watch", "-n", "family"); err == nil || !strings.Contains(out, "computer") {
		// The Dot's computer does not run here (no image on this host):
		// the refusal is the Dots API's own, so the request reached it.
		t.Errorf("the editor's files ls of a Dot whose computer is off: %v\n%s", err, out)
	}

	t.Log("when the server is gone, the client says where it looked")
	ours.stop()
	if _, err := bob.Health(ctx); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(url, "https://")) {
		t.Errorf("the health with our server stopped: %v; want an error naming %s", err, url)
	}

	t.Log("with the controllers' own ServiceAccount and config/default's roles, nothing more")
	cluster.mustKubectl("apply", "-k", "config/default")
	token := strings.TrimSpace(cluster.mustKubectl("create", "token", "invisible-dots-controller", "-n", "invisible-dots-system", "--duration", "1h"))
	raw, err := clientcmd.LoadFromFile(cluster.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range raw.AuthInfos {
		a.Token = token
	}
	saFile := filepath.Join(filepath.Dir(ourHome), "controller.kubeconfig")
	if err := clientcmd.WriteToFile(*raw, saFile); err != nil {
		t.Fatal(err)
	}
	saHome := newHome(t)
	sa := launch(t, saHome, []string{"server", "--no-web", "--kubeconfig", saFile}, "INVISIBLE_DOTS_HOST=sa-host")
	eventually(t, 2*time.Minute, "the ServiceAccount's server publishes its Dots API", func() error {
		if sa.exited(0) {
			t.Fatalf("the server exited:\n%s", sa.logTail(20))
		}
		got, err := cluster.kubectl("get", "configmap", "-n", "invisible-dots-system", wire.DiscoveryConfigMap, "-o", "jsonpath={.data.server}")
		if err != nil || !strings.HasSuffix(got, sa.addr) {
			return fmt.Errorf("the ConfigMap names %q: %v", got, err)
		}
		return nil
	})
	eventually(t, 30*time.Second, "the editor's message through the ServiceAccount's server", func() error {
		_, err := ada.PostMessage(ctx, "family", "fare-watch", "and the 10:10?")
		return err
	})
	if h, err := bob.Health(ctx); err != nil || h.Home != saHome {
		t.Errorf("the viewer's health: %+v, %v; want the home %s", h, err, saHome)
	}
	if _, err := bob.PostMessage(ctx, "family", "fare-watch", "hello"); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("the viewer's post: %v; want 403", err)
	}
	t.Log("the host agent in the same process works with that credential too")
	eventually(t, time.Minute, "the host sa-host registered", func() error {
		_, err := cluster.kubectl("get", "host", "sa-host")
		return err
	})
	for _, line := range strings.Split(sa.logTail(400), "\n") {
		// Installing the roles is config/default's work, not this
		// credential's: that refusal is expected and said.
		if strings.Contains(line, "forbidden") && !strings.Contains(line, "could not install the system namespace and the roles") {
			t.Errorf("the server met a refusal with config/default's roles: %s", line)
		}
	}
}
