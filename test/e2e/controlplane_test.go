package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/postgres"
)

const (
	sampleDot     = "config/samples/dots_v1alpha1_dot.yaml"
	sampleTask    = "config/samples/dots_v1alpha1_task.yaml"
	sampleInvalid = "config/samples/invalid_dot.yaml"
)

// TestControlPlaneWithKubectl is a person's first session: start the server,
// point kubectl at it, manage Dots, restart, and find everything again.
func TestControlPlaneWithKubectl(t *testing.T) {
	home := newHome(t)
	s := startServer(t, home)

	t.Run("kubeconfig is private and kubectl version shows the embedded server", func(t *testing.T) {
		st, err := os.Stat(s.kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("kubeconfig mode = %v, want 0600", st.Mode().Perm())
		}
		out := s.mustKubectl("version")
		if !strings.Contains(out, "Server Version: v1.37") {
			t.Errorf("kubectl version does not show the embedded v1.37 server:\n%s", out)
		}
		cmd := exec.Command(binary, "kubeconfig")
		cmd.Env = s.env
		printed, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		file, _ := os.ReadFile(s.kubeconfig())
		if string(printed) != string(file) {
			t.Errorf("invisible-dots kubeconfig prints something else than %s", s.kubeconfig())
		}
	})

	t.Run("apply the samples and get them with printer columns", func(t *testing.T) {
		out := s.mustKubectl("apply", "-f", sampleDot, "-f", sampleTask)
		if !strings.Contains(out, "dot.dots.invisible.dev/fare-watch created") {
			t.Errorf("apply output:\n%s", out)
		}
		eventually(t, 30*time.Second, "the Dot shows its Computer's state", func() error {
			out, err := s.kubectl("get", "dot")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			for _, col := range []string{"NAME", "PHASE", "MODEL", "COMPUTER", "READY", "AGE", "fare-watch", "z-ai/glm-5.3-flash", "PROVISIONING"} {
				if !strings.Contains(out, col) {
					return fmt.Errorf("no %q in\n%s", col, out)
				}
			}
			return nil
		})
		out = s.mustKubectl("get", "dot", "-o", "wide")
		for _, col := range []string{"TASK", "APPROVALS"} {
			if !strings.Contains(out, col) {
				t.Errorf("-o wide has no %s column:\n%s", col, out)
			}
		}
		out = s.mustKubectl("get", "computers")
		if !strings.Contains(out, "fare-watch") || !strings.Contains(out, "OnDemand") {
			t.Errorf("the Dot's Computer is not listed:\n%s", out)
		}
		out = s.mustKubectl("get", "tk")
		if !strings.Contains(out, "check-lisbon-fares") {
			t.Errorf("the short name tk does not list the task:\n%s", out)
		}
	})

	t.Run("the invisible-dots category lists every kind, and dots is the Dots", func(t *testing.T) {
		// DESIGN.md 3: "kubectl get invisible-dots" lists every namespaced
		// kind; "kubectl get dots" is the Dot kind alone, so -w works.
		out := s.mustKubectl("api-resources", "--categories", "invisible-dots", "-o", "name")
		for _, kind := range []string{"dots.dots.invisible.dev", "computers.dots.invisible.dev", "tasks.dots.invisible.dev", "approvals.dots.invisible.dev"} {
			if !strings.Contains(out, kind) {
				t.Errorf("the invisible-dots category has no %s:\n%s", kind, out)
			}
		}
		if strings.Contains(out, "hosts.") {
			t.Errorf("the invisible-dots category holds the cluster-scoped Hosts, which a person with a namespace is refused:\n%s", out)
		}
		out = s.mustKubectl("get", "invisible-dots")
		for _, want := range []string{"dot.dots.invisible.dev/fare-watch", "computer.dots.invisible.dev/fare-watch", "task.dots.invisible.dev/check-lisbon-fares"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get invisible-dots does not list %s:\n%s", want, out)
			}
		}
		out = s.mustKubectl("get", "dots")
		if !strings.Contains(out, "fare-watch") || strings.Contains(out, "computer.dots.invisible.dev") || strings.Contains(out, "task.dots.invisible.dev") {
			t.Errorf("kubectl get dots lists more than the Dots:\n%s", out)
		}
	})

	t.Run("a person with a namespace lists and watches its Dots", func(t *testing.T) {
		file := filepath.Join(filepath.Dir(home), "carol.kubeconfig")
		if out, err := exec.Command(binary, "user", "add", "carol", "--namespace", "default", "--role", "viewer",
			"--kubeconfig", s.kubeconfig(), "--output", file).CombinedOutput(); err != nil {
			t.Fatalf("user add carol: %v\n%s", err, out)
		}
		for _, args := range [][]string{{"get", "dots"}, {"get", "invisible-dots", "-n", "default"}} {
			out, err := runKubectl(file, args...)
			if err != nil || !strings.Contains(out, "fare-watch") {
				t.Errorf("carol: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		// A watch runs until it is stopped: what it printed by then.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		watch := exec.CommandContext(ctx, "kubectl", "--kubeconfig", file, "get", "dots", "-w")
		out, _ := watch.CombinedOutput()
		if !strings.Contains(string(out), "fare-watch") || strings.Contains(string(out), "error") {
			t.Errorf("carol: kubectl get dots -w printed:\n%s", out)
		}
	})

	t.Run("explain documents the fields", func(t *testing.T) {
		out := s.mustKubectl("explain", "dot.spec.computer")
		for _, want := range []string{"cpu", "memory", "idleTimeout", "1 to 16"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl explain dot.spec.computer has no %q:\n%s", want, out)
			}
		}
	})

	t.Run("the invalid sample is refused with its field paths", func(t *testing.T) {
		out, err := s.kubectl("apply", "-f", sampleInvalid)
		if err == nil {
			t.Fatalf("the invalid Dot was accepted:\n%s", out)
		}
		for _, want := range []string{
			`The Dot "too-big" is invalid`,
			"spec.computer.cpu",
			"spec.computer.memory",
			`unknown model role "fast" (the roles are: summary)`,
			"unknown permission web.search",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, out)
			}
		}
		if out, _ := s.kubectl("get", "dot", "too-big"); !strings.Contains(out, "NotFound") {
			t.Errorf("a refused Dot was stored: %s", out)
		}
	})

	t.Run("server-side apply and diff", func(t *testing.T) {
		s.mustKubectl("apply", "--server-side", "-f", sampleDot, "--force-conflicts")
		changed := strings.Replace(readRepoFile(t, sampleDot), "cpu: 2", "cpu: 3", 1)
		out, err := s.kubectlIn(changed, "diff", "-f", "-")
		if err == nil {
			t.Errorf("kubectl diff found no difference for a changed cpu:\n%s", out)
		}
		if !strings.Contains(out, "-    cpu: 2") || !strings.Contains(out, "+    cpu: 3") {
			t.Errorf("kubectl diff does not show the cpu change:\n%s", out)
		}
		out, err = s.kubectl("diff", "-f", sampleDot)
		if err != nil {
			t.Errorf("kubectl diff of the applied file shows a difference: %v\n%s", err, out)
		}
	})

	t.Run("the GitOps sample diffs and applies as one unit", func(t *testing.T) {
		out, err := s.kubectl("diff", "-k", "config/samples/gitops")
		if err == nil || !strings.Contains(out, "research") {
			t.Errorf("kubectl diff -k shows no new Dot research (err %v):\n%s", err, out)
		}
		out = s.mustKubectl("apply", "-k", "config/samples/gitops", "--server-side", "--force-conflicts")
		if !strings.Contains(out, "dot.dots.invisible.dev/research serverside-applied") {
			t.Errorf("kubectl apply -k output:\n%s", out)
		}
		if out, err := s.kubectl("diff", "-k", "config/samples/gitops"); err != nil {
			t.Errorf("after apply, kubectl diff -k still differs: %v\n%s", err, out)
		}
		s.mustKubectl("delete", "dot", "research", "--wait=false")
	})

	t.Run("a watch sees an update", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		watch := exec.CommandContext(ctx, "kubectl", "--kubeconfig", s.kubeconfig(), "get", "dot", "--watch-only", "-o", "custom-columns=NAME:.metadata.name,STEPS:.spec.limits.maxStepsPerTask", "--no-headers")
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = watch.Wait() }()
		seen := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				seen <- sc.Text()
			}
			close(seen)
		}()
		// The watch may start after a first patch; keep patching with a
		// new value until it reports one.
		deadline := time.After(45 * time.Second)
		for i := 61; ; i++ {
			s.mustKubectl("patch", "dot", "fare-watch", "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"limits":{"maxStepsPerTask":%d}}}`, i))
			select {
			case line := <-seen:
				if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "fare-watch" && fields[1] != "60" {
					return
				}
			case <-time.After(2 * time.Second):
			case <-deadline:
				t.Fatal("the watch saw no update in 45 s")
			}
		}
	})

	t.Run("the data survives a restart", func(t *testing.T) {
		before := s.mustKubectl("get", "dot", "fare-watch", "-o", "jsonpath={.metadata.uid} {.spec.limits.maxStepsPerTask}")
		// The default RBAC policy was reconciled by this version: the next
		// start does not wait for it, and its reconcile after readiness
		// still puts back a default role that was deleted.
		eventually(t, time.Minute, "the marker of the reconciled RBAC policy", func() error {
			out, err := s.kubectl("get", "configmap", "-n", "kube-system", "invisible-dots-rbac-policy", "-o", "jsonpath={.data.kubernetesVersion}")
			if err != nil || !strings.HasPrefix(out, "v1.37") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		s.mustKubectl("delete", "clusterrole", "system:heapster")
		s.stop()
		if !s.exited(0) {
			t.Fatal("the server did not exit")
		}
		s2 := startServer(t, home)
		after := s2.mustKubectl("get", "dot", "fare-watch", "-o", "jsonpath={.metadata.uid} {.spec.limits.maxStepsPerTask}")
		if before != after {
			t.Errorf("after a restart the Dot is %q, before it was %q", after, before)
		}
		s2.mustKubectl("get", "task", "check-lisbon-fares")
		eventually(t, time.Minute, "the deleted default ClusterRole is back", func() error {
			out, err := s2.kubectl("get", "clusterrole", "system:heapster", "-o", "name")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})

		t.Run("a second server on the same home is refused, naming the holder", func(t *testing.T) {
			second := launchServer(t, home)
			if !second.exited(60 * time.Second) {
				t.Fatal("a second server on the same home kept running")
			}
			log := second.logTail(20)
			if !strings.Contains(log, "server.lock") || !strings.Contains(log, fmt.Sprint(s2.cmd.Process.Pid)) {
				t.Errorf("the refusal does not name the lock file and the holder's pid %d:\n%s", s2.cmd.Process.Pid, log)
			}
			s2.mustKubectl("get", "dots")
		})

		t.Run("deleting the Dot deletes its Computer and Task", func(t *testing.T) {
			s2.mustKubectl("delete", "dot", "fare-watch", "--timeout=60s")
			eventually(t, 90*time.Second, "the Computer and Task are gone", func() error {
				out, err := s2.kubectl("get", "computers,tasks", "-o", "name")
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				if strings.TrimSpace(out) != "" {
					return fmt.Errorf("still there:\n%s", out)
				}
				return nil
			})
		})
	})
}

// TestExternalDatabase runs the server against a second PostgreSQL named by
// DATABASE_URL, and refuses an unreachable one quickly, naming the host and
// never the password.
func TestExternalDatabase(t *testing.T) {
	dbHome := newHome(t)
	ctx := context.Background()
	db, err := postgres.StartStandalone(ctx, dbHome, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	dsn := db.DSN()
	t.Cleanup(func() { _ = db.Stop(context.Background()) })

	home := newHome(t)
	s := startServer(t, home, "DATABASE_URL="+dsn)
	s.mustKubectl("apply", "-f", sampleDot)
	if _, err := os.Stat(filepath.Join(home, "db")); err == nil {
		t.Errorf("a managed database was made in %s although DATABASE_URL was set", home)
	}
	s.stop()

	t.Run("a second control plane on the same database is refused", func(t *testing.T) {
		first := startServer(t, newHome(t), "DATABASE_URL="+dsn)
		second := launchServer(t, newHome(t), "DATABASE_URL="+dsn)
		if !second.exited(60 * time.Second) {
			t.Fatal("a second control plane on the same database kept running")
		}
		if log := second.logTail(20); !strings.Contains(log, "held by pid") {
			t.Errorf("the refusal does not name the holder:\n%s", log)
		}
		first.mustKubectl("get", "dot", "fare-watch")
	})

	t.Run("an unreachable database fails fast", func(t *testing.T) {
		started := time.Now()
		bad := launchServer(t, newHome(t), "DATABASE_URL=postgres://dots:s3cret-pw@127.0.0.1:1/dots?sslmode=disable")
		if !bad.exited(30 * time.Second) {
			t.Fatal("the server kept trying an unreachable database")
		}
		log := bad.logTail(20)
		if !strings.Contains(log, "127.0.0.1") {
			t.Errorf("the error does not name the host:\n%s", log)
		}
		if strings.Contains(log, "s3cret-pw") {
			t.Errorf("the error shows the password:\n%s", log)
		}
		t.Logf("refused after %s", time.Since(started).Round(time.Millisecond))
	})
}

func readRepoFile(t testing.TB, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
