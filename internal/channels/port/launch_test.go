//go:build linux

package port_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// fakeProgramEnv makes this test binary play the WhatsApp program for
// Launch: it listens on --socket and welcomes every hello, nothing more.
const fakeProgramEnv = "PORT_TEST_FAKE_WHATSAPP_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(fakeProgramEnv) == "1" {
		fakeProgramMain()
		return
	}
	os.Exit(m.Run())
}

func fakeProgramMain() {
	socket := ""
	for i, a := range os.Args {
		if a == "--socket" && i+1 < len(os.Args) {
			socket = os.Args[i+1]
		}
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		os.Exit(3)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				conn := port.NewConn(c)
				defer conn.Close()
				if f, err := conn.Read(); err == nil && f.Type == port.TypeHello {
					_ = conn.Write(port.Frame{Type: port.TypeWelcome, V: port.Version})
				}
				for {
					if _, err := conn.Read(); err != nil {
						return
					}
				}
			}()
		}
	}()
	<-stop
	ln.Close()
	os.Exit(0)
}

func TestFindSaysHowToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := port.Find("")
	if !errors.Is(err, port.ErrNotInstalled) {
		t.Fatalf("Find with no program = %v, want ErrNotInstalled", err)
	}
	for _, words := range []string{"make whatsapp", "INVISIBLE_DOTS_WHATSAPP=1", port.ProgramName} {
		if !strings.Contains(err.Error(), words) {
			t.Errorf("%q does not say %q", err, words)
		}
	}
	if _, err := port.Find("/nonexistent/" + port.ProgramName); !errors.Is(err, port.ErrNotInstalled) {
		t.Errorf("Find of a missing override = %v, want ErrNotInstalled", err)
	}
	if _, err := port.Launch(context.Background(), port.LaunchOptions{Dir: t.TempDir(), Log: logr.Discard()}); !errors.Is(err, port.ErrNotInstalled) {
		t.Errorf("Launch with no program = %v, want ErrNotInstalled", err)
	}
}

func TestLaunchStartsListensRestartsAndStops(t *testing.T) {
	t.Setenv(fakeProgramEnv, "1")
	dir, err := os.MkdirTemp("", "wa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := port.Launch(ctx, port.LaunchOptions{Program: os.Args[0], Dir: dir + "/run", Log: logr.Discard()})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if st, err := os.Stat(dir + "/run"); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the socket's directory is %v (%v), want private (0700)", st.Mode().Perm(), err)
	}
	hello := func() {
		t.Helper()
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		defer dcancel()
		c, err := p.Dial(dctx)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		conn := port.NewConn(c)
		defer conn.Close()
		if err := conn.Write(port.Frame{Type: port.TypeHello, V: port.Version}); err != nil {
			t.Fatal(err)
		}
		if f, err := conn.Read(); err != nil || f.Type != port.TypeWelcome {
			t.Fatalf("the program answered %+v, %v; want welcome", f, err)
		}
	}
	hello()

	// A program that dies is started again.
	pid := programPID(t, p.Socket())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	hello()

	cancel()
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the program was not stopped with ctx")
	}
	if _, err := os.Stat(p.Socket()); !os.IsNotExist(err) {
		t.Errorf("the socket is left after the stop: %v", err)
	}
}

// programPID is the pid of the process listening on socket (its peer
// credentials).
func programPID(t *testing.T, socket string) int {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(cred.Pid)
}
