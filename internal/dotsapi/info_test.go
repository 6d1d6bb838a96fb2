package dotsapi

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/version"
)

func TestHealth(t *testing.T) {
	ctx := context.Background()
	for _, stored := range []bool{false, true} {
		e := newGuestEnv(t, guestEnvOptions{defaultKey: stored})
		c, err := client.New(e.restConfig("nobody"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := wire.Health{Status: "ok", Database: "ok", Version: version.Version, OpenRouterConfigured: stored,
			DatabaseKind: wire.DatabaseManaged, Home: "/srv/dots", LogsDir: "/srv/dots/logs"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("with a key stored %v: -want +got:\n%s", stored, diff)
		}
	}
}

func TestDoctor(t *testing.T) {
	ctx := context.Background()
	report := doctor.Report{OK: false, Checks: []doctor.Check{
		{Name: doctor.RowQEMU, Status: doctor.OK, Detail: "QEMU 7.2"},
		{Name: doctor.RowAccelerator, Status: doctor.Missing, Detail: "/dev/kvm does not open", Fix: "sudo usermod -aG kvm $USER"},
	}}
	release := make(chan struct{})
	e := newGuestEnv(t, guestEnvOptions{doctor: func(context.Context) doctor.Report {
		<-release
		return report
	}})
	admin, err := client.New(e.restConfig("admin"))
	if err != nil {
		t.Fatal(err)
	}
	// Callers that ask while a run goes on share it: one QEMU probe.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			got, err := admin.Doctor(ctx)
			if err == nil && !cmp.Equal(report, got) {
				err = &client.Error{Message: cmp.Diff(report, got)}
			}
			errs <- err
		})
	}
	// Let the three callers reach the run before it ends: each is counted
	// as it enters the handler, which reaches the run without waiting.
	for deadline := time.Now().Add(10 * time.Second); e.entered.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Doctor: %v", err)
		}
	}
	if n := len(e.doctorRuns); n != 1 {
		t.Errorf("the doctor ran %d times for three callers at once; want 1", n)
	}

	// A server that does not run the doctor says so.
	none := newGuestEnv(t, guestEnvOptions{})
	if got, _, _ := none.get(t, "admin", wire.DoctorPath, nil); !got.matches(answer{http.StatusNotImplemented, wire.CodeNotImplemented, "does not run the doctor"}) {
		t.Errorf("doctor without one: %+v", got)
	}
}
