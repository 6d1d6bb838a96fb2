package qemu

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// TestGuestTarget: the guest link's targets are the VM's record of this
// boot, with the QEMU's start time and boot id; a record that cannot give
// them is refused, never turned into a target proved with less.
func TestGuestTarget(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	tests := map[string]struct {
		reason  string
		record  *record // nil: no qemu.json
		raw     string  // written as qemu.json instead, when set
		want    guestclient.Target
		wantErr error
	}{
		"the record": {reason: "port, pid, start time and boot id from qemu.json",
			record: &record{PID: 4242, GuestPort: 40000, Stamp: boot, ProcStartTicks: 777},
			want:   guestclient.Target{Port: 40000, PID: 4242, Token: testToken, StartTicks: 777, BootID: "boot-a"}},
		"no start time": {reason: "a record without the start time cannot prove its QEMU",
			record: &record{PID: 4242, GuestPort: 40000, Stamp: boot}, wantErr: guestclient.ErrGuestUnproven},
		"no boot id": {reason: "a record without the boot id cannot prove its QEMU",
			record: &record{PID: 4242, GuestPort: 40000, Stamp: home.Stamp{HostUptimeS: 1000}, ProcStartTicks: 777}, wantErr: guestclient.ErrGuestUnproven},
		"another boot": {reason: "a record written before the host restarted names no running VM",
			record: &record{PID: 4242, GuestPort: 40000, Stamp: home.Stamp{BootID: "boot-0", HostUptimeS: 5}, ProcStartTicks: 777}, wantErr: driver.ErrNotRunning},
		"no record": {reason: "no qemu.json: not running", wantErr: driver.ErrNotRunning},
		"unreadable": {reason: "a record that does not parse is an error, not a target",
			raw: "{", wantErr: errUnreadable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := testDriver(t, &boot)
			switch {
			case tc.raw != "":
				if err := os.WriteFile(d.home.VM(testID).QEMUJSON(), []byte(tc.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			case tc.record != nil:
				writeTestRecord(t, d, *tc.record)
			}
			got, err := d.GuestTarget(context.Background(), testID, testToken)
			switch {
			case tc.wantErr == errUnreadable:
				if err == nil || errors.Is(err, driver.ErrNotRunning) || got != (guestclient.Target{}) {
					t.Errorf("%s: GuestTarget() = %+v, %v; want an error of its own", tc.reason, got, err)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) || got != (guestclient.Target{}) {
					t.Errorf("%s: GuestTarget() = %+v, %v; want %v", tc.reason, got, err, tc.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("%s: GuestTarget() = %v", tc.reason, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s: GuestTarget() (-want +got):\n%s", tc.reason, diff)
				}
			}
		})
	}
}

// errUnreadable marks a case whose error is the record's own.
var errUnreadable = errors.New("unreadable")

// TestDriverCallsProveTheWholeIdentity: the driver's own calls to the guest
// (health, poweroff, prepare-sleep) hand the listener rule the QEMU's start
// time and boot id from the record, not the pid alone.
func TestDriverCallsProveTheWholeIdentity(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	d := testDriver(t, &boot)
	p, ticks := bystander(t)
	port, _ := fakeGuest(t, testToken, nil)
	writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})
	want := guestclient.Target{Port: port, PID: p.Process.Pid, Token: testToken, StartTicks: ticks, BootID: "boot-a"}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"health":        func() error { _, err := d.Health(ctx, testID, testToken); return err },
		"poweroff":      func() error { return d.Poweroff(ctx, testID, testToken) },
		"prepare-sleep": func() error { return d.PrepareSleep(ctx, testID, testToken) },
	} {
		t.Run(name, func(t *testing.T) {
			// A client of its own per call: a pooled connection would skip
			// the rule.
			var seen []guestclient.Target
			d.guest = guestclient.New()
			d.guest.ListenerRule = func(tg guestclient.Target) error { seen = append(seen, tg); return nil }
			_ = call() // the fake guest answers some routes with 404; the rule ran before
			if diff := cmp.Diff([]guestclient.Target{want}, seen); diff != "" {
				t.Errorf("%s: targets the listener rule saw (-want +got):\n%s", name, diff)
			}
		})
	}
}
