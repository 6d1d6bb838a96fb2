package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPowerRequests(t *testing.T) {
	now := time.Date(2026, 8, 1, 12, 30, 0, 123456789, time.FixedZone("CEST", 2*60*60))
	const stamp = "2026-08-01T10:30:00.123456789Z"
	type want struct {
		strategy    RunStrategy
		annotations map[string]string
		// err is a fragment of the refusal, "" for none.
		err string
	}
	computer := func(s RunStrategy, annotations map[string]string) *Computer {
		return &Computer{ObjectMeta: metav1.ObjectMeta{Name: "helper", Annotations: annotations}, Spec: ComputerSpec{RunStrategy: s}}
	}
	tests := map[string]struct {
		reason string
		c      *Computer
		do     func(c *Computer) error
		want   want
	}{
		"start lifts a person's stop": {
			reason: "a start is someone's wish that it runs: Halted yields to it and becomes OnDemand",
			c:      computer(RunHalted, nil),
			do:     func(c *Computer) error { c.RequestStart(now); return nil },
			want:   want{strategy: RunOnDemand, annotations: map[string]string{StartRequestedAnnotation: stamp}},
		},
		"start keeps Always": {
			reason: "only a person's stop is lifted; Always stays Always",
			c:      computer(RunAlways, nil),
			do:     func(c *Computer) error { c.RequestStart(now); return nil },
			want:   want{strategy: RunAlways, annotations: map[string]string{StartRequestedAnnotation: stamp}},
		},
		"start replaces an earlier request": {
			reason: "a new request is a new value, so the reconciler acts on it although it handled the last one",
			c:      computer(RunOnDemand, map[string]string{StartRequestedAnnotation: "2026-07-01T00:00:00Z", "other": "kept"}),
			do:     func(c *Computer) error { c.RequestStart(now); return nil },
			want:   want{strategy: RunOnDemand, annotations: map[string]string{StartRequestedAnnotation: stamp, "other": "kept"}},
		},
		"halt": {
			reason: "a person's stop is the spec's runStrategy, no annotation",
			c:      computer(RunAlways, nil),
			do:     func(c *Computer) error { c.Halt(); return nil },
			want:   want{strategy: RunHalted},
		},
		"reboot": {
			reason: "a reboot of a computer that may run is one annotation",
			c:      computer(RunOnDemand, nil),
			do:     func(c *Computer) error { return c.RequestReboot(now) },
			want:   want{strategy: RunOnDemand, annotations: map[string]string{RebootRequestedAnnotation: stamp}},
		},
		"reboot refused while halted": {
			reason: "a reboot would start it against a person's stop: the refusal says to start it, and nothing is written",
			c:      computer(RunHalted, nil),
			do:     func(c *Computer) error { return c.RequestReboot(now) },
			want:   want{strategy: RunHalted, err: "stopped by a person (runStrategy Halted): start it instead, with 'invisible-dots computer start helper'"},
		},
		"sleep": {
			reason: "the control plane's sleep is one annotation and leaves the strategy alone",
			c:      computer(RunOnDemand, nil),
			do:     func(c *Computer) error { c.RequestSleep(now); return nil },
			want:   want{strategy: RunOnDemand, annotations: map[string]string{SleepRequestedAnnotation: stamp}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.do(tc.c)
			switch {
			case tc.want.err == "" && err != nil:
				t.Errorf("%s: unexpected error %v", tc.reason, err)
			case tc.want.err != "" && (err == nil || !strings.Contains(err.Error(), tc.want.err) || !errors.Is(err, ErrHalted)):
				t.Errorf("%s: error %v; want ErrHalted saying %q", tc.reason, err, tc.want.err)
			}
			got := want{strategy: tc.c.Spec.RunStrategy, annotations: tc.c.Annotations, err: tc.want.err}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
