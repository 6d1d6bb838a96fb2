package fake

import (
	"context"
	"testing"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func TestHostLifecycle(t *testing.T) {
	ctx := context.Background()
	h := NewHost()
	id := home.VMID{Namespace: "default", Name: "helper"}
	obs, err := h.Start(ctx, driver.Spec{ID: id})
	if err != nil || obs.State != driver.Running || obs.PID == 0 {
		t.Fatalf("Start() = %+v, %v; want Running with a pid", obs, err)
	}
	again, _ := h.Start(ctx, driver.Spec{ID: id})
	if again.PID != obs.PID {
		t.Errorf("second Start() changed the pid %d -> %d; want idempotent", obs.PID, again.PID)
	}
	if err := h.Crash(id); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Observe(ctx, id); got.State != driver.Stopped || !got.Exited {
		t.Errorf("after Crash, Observe() = %+v; want Stopped and Exited", got)
	}
	h.Start(ctx, driver.Spec{ID: id})
	h.RebootHost()
	if got, _ := h.Observe(ctx, id); got.State != driver.Stopped || !got.StaleBoot {
		t.Errorf("after RebootHost, Observe() = %+v; want Stopped and StaleBoot", got)
	}
	if len(h.Running()) != 0 {
		t.Errorf("after RebootHost, Running() = %v; want none", h.Running())
	}
	if err := h.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Observe(ctx, id); got.Provisioned {
		t.Errorf("after Destroy, Observe() = %+v; want not provisioned", got)
	}
}

func TestHostHealth(t *testing.T) {
	ctx := context.Background()
	h := NewHost()
	id := home.VMID{Namespace: "default", Name: "helper"}
	if _, err := h.Health(ctx, id, "t"); err == nil {
		t.Error("Health() of a VM never started: want an error")
	}
	h.Start(ctx, driver.Spec{ID: id})
	if got, err := h.Health(ctx, id, "t"); err != nil || got.Agentd != "ok" {
		t.Errorf("Health() of a running VM = %+v, %v", got, err)
	}
}
