package setup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// steps is a fake machine for setup --all: each step is done once it ran
// without failing; fail makes a step fail (once, or until cleared).
type steps struct {
	done map[string]bool
	fail map[string]error
	ran  []string
	// during runs inside a step's run (Ctrl-C arriving mid-step).
	during map[string]func()
}

func newSteps() *steps {
	return &steps{done: map[string]bool{}, fail: map[string]error{}, during: map[string]func(){}}
}

func (m *steps) list(names ...string) []Step {
	var out []Step
	for _, n := range names {
		out = append(out, Step{
			Name: n, Command: "invisible-dots " + n,
			Done: func(context.Context) (string, bool, error) { return n + " is there", m.done[n], nil },
			Run: func(ctx context.Context) error {
				m.ran = append(m.ran, n)
				if f := m.during[n]; f != nil {
					f()
					return ctx.Err()
				}
				if err := m.fail[n]; err != nil {
					return err
				}
				m.done[n] = true
				return nil
			},
		})
	}
	return out
}

func TestRunAllSkipsDoneStepsAndContinuesAfterAFailure(t *testing.T) {
	m := newSteps()
	m.done["setup"] = true // a run before this one got that far
	m.fail["image build"] = errors.New("mmdebstrap: no network")
	names := []string{"setup", "web", "image build", "last"}

	out := &bytes.Buffer{}
	err := RunAll(context.Background(), out, m.list(names...))
	var se *StepError
	if !errors.As(err, &se) || se.ExitCode() != 1 || se.N != 3 || se.Stopped {
		t.Fatalf("RunAll() = %v; want step 3 failed, exit code 1", err)
	}
	for _, want := range []string{"mmdebstrap: no network", "run again to continue: " + AllCommand, "invisible-dots image build"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if diff := cmp.Diff([]string{"web", "image build"}, m.ran); diff != "" {
		t.Errorf("first run ran (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "[1/4] setup: already done (setup is there)") {
		t.Errorf("the done step is not said to be done:\n%s", out)
	}

	// The second run continues where the first stopped.
	delete(m.fail, "image build")
	m.ran = nil
	if err := RunAll(context.Background(), &bytes.Buffer{}, m.list(names...)); err != nil {
		t.Fatalf("second RunAll() = %v", err)
	}
	if diff := cmp.Diff([]string{"image build", "last"}, m.ran); diff != "" {
		t.Errorf("second run ran (-want +got):\n%s", diff)
	}

	// A third has nothing to do.
	m.ran = nil
	if err := RunAll(context.Background(), &bytes.Buffer{}, m.list(names...)); err != nil || m.ran != nil {
		t.Errorf("third RunAll() = %v, ran %v; want nothing run", err, m.ran)
	}
}

func TestRunAllCtrlCEndsTheRunBetweenSteps(t *testing.T) {
	m := newSteps()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Ctrl-C during the image build: the step stops (its command handles
	// its context) and nothing after it runs.
	m.during["image build"] = cancel
	err := RunAll(ctx, &bytes.Buffer{}, m.list("setup", "image build", "last"))
	var se *StepError
	if !errors.As(err, &se) || !se.Stopped || se.ExitCode() != 130 || se.N != 2 {
		t.Fatalf("RunAll() = %v; want stopped at step 2 with exit code 130", err)
	}
	if !strings.Contains(err.Error(), AllCommand) {
		t.Errorf("error %q does not say to run %s again", err, AllCommand)
	}
	if diff := cmp.Diff([]string{"setup", "image build"}, m.ran); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}

	// Stopped before a run starts: nothing runs.
	m.ran = nil
	if err := RunAll(ctx, &bytes.Buffer{}, m.list("last")); !errors.As(err, &se) || !se.Stopped || m.ran != nil {
		t.Errorf("RunAll(cancelled) = %v, ran %v; want stopped before anything ran", err, m.ran)
	}
}

func TestRunAllLeftStepGoesOn(t *testing.T) {
	m := newSteps()
	list := m.list("setup", "web", "images")
	list[1].Done = func(context.Context) (string, bool, error) { return "", false, nil }
	list[1].Run = func(context.Context) error { return &LeftError{What: "make build builds the web client in"} }
	out := &bytes.Buffer{}
	if err := RunAll(context.Background(), out, list); err != nil {
		t.Fatalf("RunAll() = %v", err)
	}
	if diff := cmp.Diff([]string{"setup", "images"}, m.ran); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "left to you: make build builds the web client in") {
		t.Errorf("output does not say what is left:\n%s", out)
	}
}

func TestSudoImageBuildCarriesThePersonsHome(t *testing.T) {
	p, err := home.ForPerson(func(k string) string {
		return map[string]string{"HOME": "/home/anna", "USER": "anna", home.EnvHome: "/data/dots"}[k]
	}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := SudoImageBuild("/src/bin/invisible-dots", p, "/src", "", "/tmp/g/dot-agentd", "/tmp/g/dot-engine")
	want := []string{"sudo", "/src/bin/invisible-dots", "image", "build", "--for-home", "/data/dots", "--repo", "/src",
		"--agentd", "/tmp/g/dot-agentd", "--engine", "/tmp/g/dot-engine"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	// The run under sudo decides the same home from the flag, for anna.
	root, err := home.ForPerson(func(k string) string {
		return map[string]string{"HOME": "/root", "SUDO_USER": "anna", home.EnvHome: got[5]}[k]
	}, 0, func(string) (*user.User, error) {
		return &user.User{Username: "anna", Uid: "1000", Gid: "1000", HomeDir: "/home/anna"}, nil
	})
	if err != nil || root.Home != p.Home || !root.GiveBack || root.UID != 1000 {
		t.Errorf("under sudo: %+v, %v; want anna's /data/dots, given back to 1000", root, err)
	}
}

func TestImagesDone(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	if _, done := ImagesDone(h, "0123456789abcdef"); done {
		t.Error("an empty home: want not done")
	}
	withImages(t, h) // a golden image with the desktop, runtime v1
	if _, done := ImagesDone(h, "0123456789abcdef"); done {
		t.Error("no runtime ISO of these binaries: want not done")
	}
	// A runtime ISO of these binaries' sum ("<date>-<sum>").
	v := "20260101T000000Z-0123456789abcdef"
	os.WriteFile(h.ImageFile(home.Runtime, v), []byte("x"), 0o644)
	os.WriteFile(h.ImageManifest(home.Runtime, v), []byte(`{"kind":"runtime","version":"`+v+`","file":"`+filepath.Base(h.ImageFile(home.Runtime, v))+`","sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881","size":1}`), 0o644)
	if detail, done := ImagesDone(h, "0123456789abcdef"); !done || !strings.Contains(detail, v) {
		t.Errorf("ImagesDone() = %q, %v; want done, naming %s", detail, done, v)
	}
}

// Under sudo the doctor's probe runs as root and passes; /dev/kvm is asked
// for the person, who gets the group line.
func TestSetupUnderSudoChecksKVMForThePerson(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	withImages(t, layout)
	h := newHost(t)
	for _, p := range []string{"qemu-system-x86", "qemu-utils", "postgresql"} {
		h.install(t, p)
	}
	h.kvmErr = os.ErrPermission // as anna; the probe (as root) passes
	d, out := h.deps(t, layout, 0)
	d.ForOther = true
	_, err := Run(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), "sudo usermod -aG kvm anna") {
		t.Errorf("Run() = %v; want the kvm group line for anna\n%s", err, out)
	}
	// Run by anna herself, the probe's pass is the last word (ref 11.1).
	d.ForOther = false
	if _, err := Run(context.Background(), d); err != nil {
		t.Errorf("Run() as anna = %v; want ok (the probe passed)", err)
	}
}

// Within setup --all the images are a later step's: setup does not fail on
// their rows.
func TestSetupLeavesTheImagesToALaterStep(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	h := newHost(t)
	d, out := h.deps(t, layout, 0)
	if _, err := Run(context.Background(), d); err == nil {
		t.Fatal("setup alone with no images: want the rows still failing")
	}
	d.Later = map[string]bool{doctor.RowGolden: true, doctor.RowRuntime: true}
	if _, err := Run(context.Background(), d); err != nil {
		t.Errorf("setup with the images left to a later step = %v\n%s", err, out)
	}
}

// The check as the person is the kernel's: a root-only file is not theirs.
func TestReadWriteForAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a command as another user")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here")
	}
	dev := filepath.Join(t.TempDir(), "kvm")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's directories are 0700: nobody must reach the file.
	os.Chmod(filepath.Dir(dev), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(dev)), 0o755)
	if err := readWriteFor(nobody, dev); !errors.Is(err, os.ErrPermission) {
		t.Errorf("readWriteFor(nobody, root's 0600 file) = %v; want a permission error", err)
	}
	os.Chmod(dev, 0o666)
	if err := readWriteFor(nobody, dev); err != nil {
		t.Errorf("readWriteFor(nobody, a 0666 file) = %v; want nil", err)
	}
	if err := readWriteFor(nobody, dev+".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readWriteFor(missing) = %v; want not exist", err)
	}
}

// The image build under sudo: Ctrl-C (a cancelled context) reaches it as
// SIGTERM through sudo, and the run waits for it to stop.
func TestRunElevatedPassesTheStopOn(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := "#!/bin/sh\necho \"$@\" > " + log + "\ntrap 'echo stopped >> " + log + "; exit 130' TERM\nwhile :; do sleep 0.1; done\n"
	if err := os.WriteFile(filepath.Join(dir, "sudo"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- RunElevated(ctx, []string{"sudo", "/bin/invisible-dots", "image", "build"}, nil, &bytes.Buffer{})
	}()
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(log); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 130 {
			t.Errorf("RunElevated() = %v; want the build's own exit 130 after its stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunElevated did not return after the stop")
	}
	b, _ := os.ReadFile(log)
	if string(b) != "/bin/invisible-dots image build\nstopped\n" {
		t.Errorf("the fake sudo saw %q; want the command line, then the stop", b)
	}
}
