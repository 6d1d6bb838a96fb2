package dotsapi

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// A Dot's computer is started, stopped and rebooted through the Dots API,
// which applies the Computer's power rule: the caller needs patch on it, a
// start lifts a person's stop and asks for a start, a stop is a person's
// stop, a reboot asks for one and is refused while a person's stop holds.
func TestPowerComputer(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	for name, s := range map[string]dotsv1.RunStrategy{
		"halted": dotsv1.RunHalted, "halted-2": dotsv1.RunHalted, "running": dotsv1.RunOnDemand,
		"always": dotsv1.RunAlways, "rebooting": dotsv1.RunOnDemand, "kept": dotsv1.RunOnDemand,
	} {
		c := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Spec: dotsv1.ComputerSpec{RunStrategy: s}}
		if err := e.client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	as := func(who string) *client.Client {
		c, err := client.New(e.restConfig(who))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// want is what the Computer holds after the call.
	type want struct {
		strategy    dotsv1.RunStrategy
		annotations map[string]string
	}
	tests := []struct {
		reason string
		who    string
		// ns is team-a when "".
		ns, name, action string
		// status and code of a refusal; 0 for a success.
		status int
		code   string
		msg    string
		// annotation is the request a success writes, "" for none.
		annotation string
		want       want
	}{
		{reason: "a start lifts a person's stop and asks for a start", who: "editor", name: "halted", action: wire.PowerStart,
			annotation: dotsv1.StartRequestedAnnotation, want: want{strategy: dotsv1.RunOnDemand}},
		{reason: "a start leaves Always as it is", who: "editor", name: "always", action: wire.PowerStart,
			annotation: dotsv1.StartRequestedAnnotation, want: want{strategy: dotsv1.RunAlways}},
		{reason: "a stop is a person's stop", who: "editor", name: "running", action: wire.PowerStop,
			want: want{strategy: dotsv1.RunHalted}},
		{reason: "a reboot asks for one", who: "editor", name: "rebooting", action: wire.PowerReboot,
			annotation: dotsv1.RebootRequestedAnnotation, want: want{strategy: dotsv1.RunOnDemand}},
		{reason: "a reboot while a person's stop holds is refused, nothing written", who: "editor", name: "halted-2", action: wire.PowerReboot,
			status: http.StatusConflict, code: wire.CodeComputerHalted, msg: "computer team-a/halted-2 is stopped by a person (runStrategy Halted): start it instead (POST /dots/v1/namespaces/team-a/dots/halted-2/computer/start)",
			want: want{strategy: dotsv1.RunHalted}},
		{reason: "a caller without patch on computers", who: "viewer", name: "kept", action: wire.PowerStop,
			status: http.StatusForbidden, code: wire.CodeForbidden, msg: `user "vera" may not patch computers of "team-a/kept"`,
			want: want{strategy: dotsv1.RunOnDemand}},
		{reason: "no patch in another namespace", who: "editor", ns: "team-b", name: "kept", action: wire.PowerStop,
			status: http.StatusForbidden, code: wire.CodeForbidden, msg: "may not patch computers"},
		{reason: "an action that is not one", who: "editor", name: "kept", action: "wake",
			status: http.StatusNotFound, code: wire.CodeNotFound, msg: "no route", want: want{strategy: dotsv1.RunOnDemand}},
		{reason: "a Computer that does not exist", who: "editor", name: "ghost", action: wire.PowerStart,
			status: http.StatusNotFound, code: wire.CodeNotFound, msg: "no Computer ghost in namespace team-a"},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			ns := cmp.Or(tc.ns, "team-a")
			before := time.Now()
			got, err := as(tc.who).PowerComputer(ctx, ns, tc.name, tc.action)
			if tc.status != 0 {
				if client.StatusOf(err) != tc.status || client.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("%s %s/%s as %s: %v; want %d %s saying %q", tc.action, ns, tc.name, tc.who, err, tc.status, tc.code, tc.msg)
				}
			} else if err != nil {
				t.Fatalf("%s %s/%s as %s: %v", tc.action, ns, tc.name, tc.who, err)
			}
			if tc.want.strategy == "" {
				return
			}
			c := &dotsv1.Computer{}
			if err := e.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, c); err != nil {
				t.Fatal(err)
			}
			if tc.annotation != "" {
				at, err := time.Parse(time.RFC3339Nano, c.Annotations[tc.annotation])
				if err != nil || at.Before(before.Add(-time.Second)) || at.Location() != time.UTC {
					t.Errorf("%s: %s is %q; want the request's time in UTC", tc.reason, tc.annotation, c.Annotations[tc.annotation])
				}
				tc.want.annotations = map[string]string{tc.annotation: c.Annotations[tc.annotation]}
			}
			if diff := gocmp.Diff(tc.want, want{c.Spec.RunStrategy, c.Annotations}, gocmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s: the Computer (-want +got):\n%s", tc.reason, diff)
			}
			if tc.status == 0 {
				answered := wire.ComputerPowered{Namespace: ns, Name: tc.name, Action: tc.action, RunStrategy: string(tc.want.strategy), RequestedAt: tc.want.annotations[tc.annotation]}
				if diff := gocmp.Diff(answered, got); diff != "" {
					t.Errorf("%s: the answer (-want +got):\n%s", tc.reason, diff)
				}
			}
		})
	}
}

// The route takes no query and no body but an empty object, and only POST.
func TestPowerComputerRefusesParameters(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	path := wire.ComputerPowerPath(runningDot.Namespace, runningDot.Name, wire.PowerStart)
	for _, tc := range []struct {
		reason, method, body, query string
		want                        answer
	}{
		{reason: "a field in the body", method: http.MethodPost, body: `{"at":"now"}`, want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "at"`}},
		{reason: "a query parameter", method: http.MethodPost, query: "force=1", want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "takes no query parameters"}},
		{reason: "a GET", method: http.MethodGet, want: answer{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "does not take GET"}},
		{reason: "an empty object is no parameter", method: http.MethodPost, body: `{}`, want: answer{Status: http.StatusOK}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			p := path
			if tc.query != "" {
				p += "?" + tc.query
			}
			got, _ := e.call(t, "editor", tc.method, p, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("%s %s as editor: %+v; want %+v", tc.method, p, got, tc.want)
			}
		})
	}
}

// A write of the Computer made by someone else between the route's read and
// its write (the host agent's status, a label) is a Conflict: the route
// reads again and decides again, and both writes stay.
func TestPowerComputerRetriesAConflict(t *testing.T) {
	ctx := context.Background()
	var interrupted atomic.Bool
	var patches atomic.Int32
	e := newGuestEnv(t, guestEnvOptions{intercept: interceptor.Funcs{
		Patch: func(ctx context.Context, c ctrlclient.WithWatch, obj ctrlclient.Object, patch ctrlclient.Patch, opts ...ctrlclient.PatchOption) error {
			if _, ok := obj.(*dotsv1.Computer); ok {
				patches.Add(1)
			}
			if _, ok := obj.(*dotsv1.Computer); ok && interrupted.CompareAndSwap(false, true) {
				other := &dotsv1.Computer{}
				if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), other); err != nil {
					return err
				}
				other.Labels = map[string]string{"written-meanwhile": "yes"}
				if err := c.Update(ctx, other); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}})
	c, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PowerComputer(ctx, runningDot.Namespace, runningDot.Name, wire.PowerStop); err != nil {
		t.Fatalf("a stop with a write in between: %v; want it written after a second read", err)
	}
	got := &dotsv1.Computer{}
	if err := e.client.Get(ctx, runningDot, got); err != nil {
		t.Fatal(err)
	}
	if n := patches.Load(); n != 2 {
		t.Errorf("the Computer was patched %d times; want 2 (a Conflict, then the write over the newer version)", n)
	}
	if !interrupted.Load() || got.Spec.RunStrategy != dotsv1.RunHalted || got.Labels["written-meanwhile"] != "yes" {
		t.Errorf("the Computer holds runStrategy %q and labels %v (interrupted: %v); want Halted and the write made meanwhile", got.Spec.RunStrategy, got.Labels, interrupted.Load())
	}
}
