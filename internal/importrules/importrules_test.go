package importrules

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/invisible-dots/invisible-dots"

// controllersPkg is the central controllers: they decide and write
// resources, and link the event log (pgx) and every reconciler. What other
// packages need of them (the host's identity, the Scheme, an Approval's
// name) lives in leaf packages.
const controllersPkg = module + "/controllers"

// controllersImporters are the only packages that may import the central
// controllers, in their code or their tests: those that start the
// controllers' manager.
var controllersImporters = []string{
	// The server command wires the control plane, the central controllers'
	// manager and the host agent into one process (server.go).
	module + "/internal/cli",
	// The controllers' integration suite runs their manager against the
	// embedded API server.
	module + "/test/integration",
}

// goTool is the go command of the toolchain running the test, else the one
// on PATH.
func goTool(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list packages with: %v", err)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// goList runs go list with args and returns its output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command(goTool(t), append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestOnlyTheWiringImportsControllers: a package that imports the central
// controllers links every reconciler and the event log's driver with them;
// only the packages that start the controllers may.
func TestOnlyTheWiringImportsControllers(t *testing.T) {
	const tab = "\t"
	lines := goList(t, "-e", "-f", `{{.ImportPath}}`+tab+`{{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, module+"/...")
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, tab)
		if pkg == controllersPkg || slices.Contains(controllersImporters, pkg) {
			continue
		}
		if slices.Contains(strings.Fields(imports), controllersPkg) {
			t.Errorf("%s imports %s, which only the packages that start its manager may (%v): the host's identity is in internal/hostidentity, the Scheme in internal/scheme, an Approval's name in api/v1alpha1", pkg, controllersPkg, controllersImporters)
		}
	}
}

// TestClientLinksNoHostAgent: the Dots API's client is what a person's
// command line and other programs link; it speaks the wire types and
// needs nothing of a host agent (QEMU, images, the doctor's probes).
func TestClientLinksNoHostAgent(t *testing.T) {
	const client = module + "/internal/dotsapi/client"
	for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", client) {
		if dep == module+"/hostagent" || strings.HasPrefix(dep, module+"/hostagent/") {
			t.Errorf("%s depends on %s: it must link nothing under hostagent/", client, dep)
		}
	}
}

// TestCommandLineTakesNothingFromTheStore: the command line speaks to the
// server through the Dots API, so what it shares with the event log (a
// message's id) is wire-level. The rule is on the CLI's own imports: its
// server command starts the control plane, which links the store.
func TestCommandLineTakesNothingFromTheStore(t *testing.T) {
	const cli, store = module + "/internal/cli", module + "/internal/store"
	imports := goList(t, "-f", `{{join .Imports "\n"}}`+"\n"+`{{join .TestImports "\n"}}`+"\n"+`{{join .XTestImports "\n"}}`, cli)
	if slices.Contains(imports, store) {
		t.Errorf("%s imports %s: take wire-level names from internal/dotsapi/wire, and the store from internal/controlplane", cli, store)
	}
}

// lifecyclePkgs are the log's projection and the decisions of a Dot's work
// and sleep: pure functions over facts, which the central controllers and
// the host agent gather.
var lifecyclePkgs = []string{module + "/internal/lifecycle", module + "/internal/lifecycle/projection"}

// TestLifecycleFetchesNothing: the projection and the decisions read facts
// and fetch nothing, so they link no API client, no event log, no
// controller and nothing of a host agent; and the projection, which only
// folds the log, depends on no decision.
func TestLifecycleFetchesNothing(t *testing.T) {
	forbidden := func(dep string) bool {
		for _, p := range []string{module + "/controllers", module + "/internal/store", module + "/hostagent", "github.com/jackc/pgx", "k8s.io/client-go", "sigs.k8s.io/controller-runtime/pkg/client"} {
			if dep == p || strings.HasPrefix(dep, p+"/") {
				return true
			}
		}
		return false
	}
	for _, pkg := range lifecyclePkgs {
		for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", pkg) {
			if forbidden(dep) {
				t.Errorf("%s depends on %s: it reads facts and fetches nothing", pkg, dep)
			}
		}
	}
	const projection = module + "/internal/lifecycle/projection"
	for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", projection) {
		if dep == module+"/internal/lifecycle" {
			t.Errorf("%s depends on %s: folding the log decides nothing", projection, dep)
		}
	}
}

// TestGuestPartsLinkNoReconciler: what reaches a host's guests (the
// registry of their tokens and targets, the guest link's notices, the event
// pump, the deliverer, the guest client and the guest endpoint) is read by
// the reconcilers, never the other way: none of it links the Computer
// reconciler, the guest link's reconciler or a VM driver.
func TestGuestPartsLinkNoReconciler(t *testing.T) {
	parts := []string{"guests", "guestnotice", "pump", "deliver", "guestclient", "guestendpoint", "guestproxy"}
	forbidden := []string{"computer", "guestlink", "qemu", "driver"}
	for _, part := range parts {
		pkg := module + "/hostagent/" + part
		for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", pkg) {
			for _, f := range forbidden {
				if dep == module+"/hostagent/"+f {
					t.Errorf("%s depends on %s: the reconcilers read the guests' parts, not the other way", pkg, dep)
				}
			}
		}
	}
}
