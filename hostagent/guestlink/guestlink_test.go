package guestlink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/computer"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

const (
	testHost   = "h1"
	defaultKey = "sk-or-default-0123456789"
	ownKey     = "sk-or-own-0123456789"
	testToken  = "0123456789abcdef0123456789abcdef"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

var dotKey = types.NamespacedName{Namespace: "default", Name: "helper"}

func testDot(edit func(d *dotsv1.Dot)) *dotsv1.Dot {
	d := &dotsv1.Dot{
		ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "default", UID: "uid-dot", Generation: 1},
		Spec: dotsv1.DotSpec{
			Model:      dotsv1.ModelRef{Provider: dotsv1.OpenRouter, ID: "z-ai/glm-5.3-flash"},
			MCPServers: []dotsv1.MCPServer{{Name: "time", Command: "uvx", Secrets: []string{"TIME_API_KEY", "UNSET"}}},
		},
	}
	if edit != nil {
		edit(d)
	}
	return d
}

func testComputer(ready bool, pid int32) *dotsv1.Computer {
	status := metav1.ConditionFalse
	state := dotsv1.ComputerStarting
	if ready {
		status, state = metav1.ConditionTrue, dotsv1.ComputerRunning
	}
	return &dotsv1.Computer{
		ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "default", UID: "uid-computer",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: "helper", UID: "uid-dot", Controller: ptr.To(true)}}},
		Spec: dotsv1.ComputerSpec{NodeName: testHost},
		Status: dotsv1.ComputerStatus{State: state, PID: pid, GuestPort: 40000,
			Conditions: []metav1.Condition{{Type: dotsv1.ReadyCondition, Status: status, Reason: "x", Message: "QEMU runs"}}},
	}
}

func tokenSecret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: computer.TokenSecretName("helper"), Namespace: "default",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: dotsv1.GroupVersion.String(), Kind: "Computer", Name: "helper", UID: "uid-computer", Controller: ptr.To(true)}}},
		Data: map[string][]byte{computer.TokenSecretKey: []byte(testToken)},
	}
}

func defaultKeySecret(key string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: dotsv1.DefaultKeySecretName, Namespace: dotsv1.SystemNamespace},
		Data:       map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte(key)},
	}
}

func ownSecret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "helper-secrets", Namespace: "default"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// journal records the guest's calls in order, with what they carried.
type journal struct {
	mu    sync.Mutex
	calls []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls = append(j.calls, fmt.Sprintf(format, args...))
}

func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.calls
	j.calls = nil
	return out
}

// recording wraps a guest's functions so every call is journaled: the
// secrets by key and MCP names, the configuration by the generation in the
// Dot's instructions (the tests write it there), the health.
func recording(j *journal, g fakeguest.GuestFns) fakeguest.GuestFns {
	return fakeguest.GuestFns{
		SecretsFn: func(ctx context.Context, t guestclient.Target, req protocol.SecretsRequest) error {
			j.add("secrets key=%s mcp=%v", req.OpenRouterAPIKey, req.MCPSecrets)
			if g.SecretsFn != nil {
				return g.SecretsFn(ctx, t, req)
			}
			return nil
		},
		ConfigFn: func(ctx context.Context, t guestclient.Target, c protocol.RuntimeConfig) error {
			j.add("config %s", c.Instructions)
			if g.ConfigFn != nil {
				return g.ConfigFn(ctx, t, c)
			}
			return nil
		},
		HealthFn: func(ctx context.Context, t guestclient.Target) (protocol.Health, error) {
			j.add("health")
			if g.HealthFn != nil {
				return g.HealthFn(ctx, t)
			}
			return fakeguest.ReadyHealth(), nil
		},
	}
}

func newReconciler(t *testing.T, guest Guest, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&dotsv1.Dot{}, &dotsv1.Computer{}).WithObjects(objs...).Build()
	r := &Reconciler{Client: c, APIReader: c, Guest: guest, VMs: recordsOf(c), HostName: testHost,
		Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakePassiveClock(testNow)}
	r.init()
	return r, c
}

// testBootID is the boot id the tests' VM records were written in.
const testBootID = "boot-test"

// testStartTicks is the start time of a test QEMU of pid.
func testStartTicks(pid int) uint64 { return 500_000 + uint64(pid) }

// records is a test's VM records: what fn says each VM's record gives.
type records func(ctx context.Context, id home.VMID, token string) (guestclient.Target, error)

func (f records) GuestTarget(ctx context.Context, id home.VMID, token string) (guestclient.Target, error) {
	return f(ctx, id, token)
}

// recordsOf is a host whose VM records name the QEMU each Computer's
// status reports (what a host agent that is up to date has), with its start
// time and the boot id.
func recordsOf(c client.Reader) records {
	return func(ctx context.Context, id home.VMID, token string) (guestclient.Target, error) {
		comp := &dotsv1.Computer{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: id.Namespace, Name: id.Name}, comp); err != nil {
			return guestclient.Target{}, err
		}
		return guestclient.Target{Port: int(comp.Status.GuestPort), PID: int(comp.Status.PID), Token: token,
			StartTicks: testStartTicks(int(comp.Status.PID)), BootID: testBootID}, nil
	}
}

func reconcileOnce(t *testing.T, r *Reconciler) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: dotKey})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func getDot(t *testing.T, c client.Client) *dotsv1.Dot {
	t.Helper()
	d := &dotsv1.Dot{}
	if err := c.Get(context.Background(), dotKey, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// bumpGeneration changes the Dot's spec as a person's apply does: a new
// generation, its number in the instructions.
func bumpGeneration(ctx context.Context, c client.Client) error {
	d := &dotsv1.Dot{}
	if err := c.Get(ctx, dotKey, d); err != nil {
		return err
	}
	d.Generation++
	d.Spec.Instructions = fmt.Sprintf("gen %d", d.Generation)
	return c.Update(ctx, d)
}

// condSummary is a condition as the tests compare it.
type condSummary struct {
	Status     metav1.ConditionStatus
	Reason     string
	Generation int64
}

func summarize(d *dotsv1.Dot) map[string]condSummary {
	out := map[string]condSummary{}
	for _, typ := range []string{dotsv1.KeyPushedCondition, dotsv1.ConfigAppliedCondition, dotsv1.AgentReadyCondition} {
		if c := meta.FindStatusCondition(d.Status.Conditions, typ); c != nil {
			out[typ] = condSummary{c.Status, c.Reason, c.ObservedGeneration}
		}
	}
	return out
}

func all(status metav1.ConditionStatus, key, config, agent string, gen int64) map[string]condSummary {
	return map[string]condSummary{
		dotsv1.KeyPushedCondition:     {status, key, gen},
		dotsv1.ConfigAppliedCondition: {status, config, gen},
		dotsv1.AgentReadyCondition:    {status, agent, gen},
	}
}

var ready1 = all(metav1.ConditionTrue, dotsv1.KeyPushedReason, dotsv1.ConfigAppliedReason, dotsv1.AgentReadyReason, 1)

func TestReadyProcedure(t *testing.T) {
	type want struct {
		calls []string
		conds map[string]condSummary
		// messages holds a fragment each condition's message must contain.
		messages map[string]string
		requeue  time.Duration
	}
	tests := map[string]struct {
		reason   string
		dot      func(d *dotsv1.Dot)
		computer *dotsv1.Computer
		secrets  []client.Object
		// guest builds the fake guest; c is the API, to change the Dot or
		// a Secret while a push runs.
		guest func(c func() client.Client) fakeguest.GuestFns
		want  want
		// never lists text that must be in no condition.
		never []string
	}{
		"pushes key then config then asks the engine": {
			reason:   "a Ready Computer's guest is given the default key, then this generation's configuration, then asked for the engine's health",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			want: want{
				calls:    []string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "health"},
				conds:    ready1,
				messages: map[string]string{dotsv1.KeyPushedCondition: "Secret invisible-dots-system/openrouter", dotsv1.ConfigAppliedCondition: "generation 1"},
				requeue:  steadyPoll,
			},
		},
		"the Dot's own key wins, with only its set MCP secrets": {
			reason: "the Secret spec.secretRef names holds the Dot's own key, which wins over the default; of the MCP secrets the config names, only those set are pushed",
			dot: func(d *dotsv1.Dot) {
				d.Spec.SecretRef = &dotsv1.SecretReference{Name: "helper-secrets"}
			},
			computer: testComputer(true, 1001),
			secrets: []client.Object{defaultKeySecret(defaultKey), ownSecret(map[string]string{
				dotsv1.OpenRouterKeySecretKey: ownKey, "mcp.time.TIME_API_KEY": "Bearer t0k", "mcp.other.X": "not named by the config",
			})},
			want: want{
				calls:    []string{"secrets key=" + ownKey + " mcp=map[time:map[TIME_API_KEY:Bearer t0k]]", "config ", "health"},
				conds:    ready1,
				messages: map[string]string{dotsv1.KeyPushedCondition: "Secret default/helper-secrets and 1 MCP secret"},
				requeue:  steadyPoll,
			},
		},
		"no key anywhere": {
			reason:   "with neither the Dot's key nor the default, nothing is pushed and KeyPushed names the command that stores one",
			computer: testComputer(true, 1001),
			want: want{
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionFalse, dotsv1.NoKeyReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
				},
				messages: map[string]string{dotsv1.KeyPushedCondition: `"invisible-dots secret openrouter"`},
				requeue:  keyPoll,
			},
		},
		"a stored key that breaks the rule": {
			reason:   "a key with a space (stored with kubectl) is not pushed; the message gives the rule, not the key",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret("sk or leaked")},
			want: want{
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionFalse, dotsv1.KeyUnusableReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
				},
				messages: map[string]string{dotsv1.KeyPushedCondition: protocol.OpenRouterKeyRule},
				requeue:  keyPoll,
			},
			never: []string{"leaked"},
		},
		"computer not ready": {
			reason:   "nothing reaches a guest whose Computer is not Ready; the three steps say so",
			computer: testComputer(false, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			want: want{
				conds: all(metav1.ConditionFalse, dotsv1.ComputerNotReadyReason, dotsv1.ComputerNotReadyReason, dotsv1.ComputerNotReadyReason, 1),
			},
		},
		"a generation change mid-push": {
			reason:   "the Dot changed while its configuration was pushed: the new generation is pushed too, and ConfigApplied names it",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(c func() client.Client) fakeguest.GuestFns {
				first := true
				return fakeguest.GuestFns{ConfigFn: func(ctx context.Context, _ guestclient.Target, _ protocol.RuntimeConfig) error {
					if first {
						first = false
						return bumpGeneration(ctx, c())
					}
					return nil
				}}
			},
			want: want{
				calls:    []string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "config gen 2", "health"},
				conds:    all(metav1.ConditionTrue, dotsv1.KeyPushedReason, dotsv1.ConfigAppliedReason, dotsv1.AgentReadyReason, 2),
				messages: map[string]string{dotsv1.ConfigAppliedCondition: "generation 2"},
				requeue:  steadyPoll,
			},
		},
		"a key rotated mid-push": {
			reason:   "the default key changed while the first one was pushed: the new one is pushed before the round counts as done",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(c func() client.Client) fakeguest.GuestFns {
				first := true
				return fakeguest.GuestFns{SecretsFn: func(ctx context.Context, _ guestclient.Target, _ protocol.SecretsRequest) error {
					if first {
						first = false
						return c().Update(ctx, defaultKeySecret("sk-or-rotated-42"))
					}
					return nil
				}}
			},
			want: want{
				calls:   []string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "secrets key=sk-or-rotated-42 mcp=map[]", "health"},
				conds:   ready1,
				requeue: steadyPoll,
			},
		},
		"the guest refuses the key": {
			reason:   "a failed push is reported by route, status and code; the guest's text, which could echo the key, is not repeated",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(func() client.Client) fakeguest.GuestFns {
				return fakeguest.GuestFns{SecretsFn: func(context.Context, guestclient.Target, protocol.SecretsRequest) error {
					return &guestclient.StatusError{Method: http.MethodPost, Path: "/v1/agent/secrets", Status: http.StatusBadGateway,
						Code: "bad_gateway", Message: "Illegal header value b'Bearer " + defaultKey + "'"}
				}}
			},
			want: want{
				calls: []string{"secrets key=" + defaultKey + " mcp=map[]"},
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionFalse, dotsv1.PushFailedReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
				},
				messages: map[string]string{dotsv1.KeyPushedCondition: "(POST /v1/agent/secrets: status 502, bad_gateway)"},
				requeue:  firstRetry,
			},
			never: []string{defaultKey, "Illegal header", "Bearer"},
		},
		"an error code that is not the protocol's": {
			reason:   "a guest (or whatever holds the port) that puts text in the code field has it dropped too",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(func() client.Client) fakeguest.GuestFns {
				return fakeguest.GuestFns{ConfigFn: func(context.Context, guestclient.Target, protocol.RuntimeConfig) error {
					return &guestclient.StatusError{Method: http.MethodPut, Path: "/v1/agent/config", Status: 500, Code: "key " + defaultKey}
				}}
			},
			want: want{
				calls: []string{"secrets key=" + defaultKey + " mcp=map[]", "config "},
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionTrue, dotsv1.KeyPushedReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionFalse, dotsv1.PushFailedReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
				},
				messages: map[string]string{dotsv1.ConfigAppliedCondition: "(PUT /v1/agent/config: status 500, an error code that is not the protocol's)"},
				requeue:  firstRetry,
			},
			never: []string{defaultKey},
		},
		"a guest that does not prove itself": {
			reason:   "an unproven listener is named as such; it was sent nothing",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(func() client.Client) fakeguest.GuestFns {
				return fakeguest.GuestFns{SecretsFn: func(context.Context, guestclient.Target, protocol.SecretsRequest) error {
					return fmt.Errorf("%w: the listener does not hold this Dot's token", guestclient.ErrGuestUnproven)
				}}
			},
			want: want{
				calls: []string{"secrets key=" + defaultKey + " mcp=map[]"},
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionFalse, dotsv1.PushFailedReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.WaitingReason, 1},
				},
				messages: map[string]string{dotsv1.KeyPushedCondition: "did not prove"},
				requeue:  firstRetry,
			},
		},
		"the engine is starting": {
			reason:   "key and configuration are in, but the engine says starting: AgentReady waits",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(func() client.Client) fakeguest.GuestFns {
				return fakeguest.GuestFns{HealthFn: func(context.Context, guestclient.Target) (protocol.Health, error) {
					h := fakeguest.ReadyHealth()
					h.Status = protocol.HealthStarting
					return h, nil
				}}
			},
			want: want{
				calls: []string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "health"},
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionTrue, dotsv1.KeyPushedReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionTrue, dotsv1.ConfigAppliedReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.AgentStartingReason, 1},
				},
				requeue: startingPoll,
			},
		},
		"a check of the engine fails": {
			reason:   "the guest's own checks must pass (ref 9.3); the failing one is named",
			computer: testComputer(true, 1001),
			secrets:  []client.Object{defaultKeySecret(defaultKey)},
			guest: func(func() client.Client) fakeguest.GuestFns {
				return fakeguest.GuestFns{HealthFn: func(context.Context, guestclient.Target) (protocol.Health, error) {
					h := fakeguest.ReadyHealth()
					h.Checks = append(h.Checks, protocol.HealthCheck{Name: "network", OK: false, Detail: "openrouter.ai:443 is not reachable"})
					return h, nil
				}}
			},
			want: want{
				calls: []string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "health"},
				conds: map[string]condSummary{
					dotsv1.KeyPushedCondition:     {metav1.ConditionTrue, dotsv1.KeyPushedReason, 1},
					dotsv1.ConfigAppliedCondition: {metav1.ConditionTrue, dotsv1.ConfigAppliedReason, 1},
					dotsv1.AgentReadyCondition:    {metav1.ConditionFalse, dotsv1.AgentStartingReason, 1},
				},
				messages: map[string]string{dotsv1.AgentReadyCondition: "network: openrouter.ai:443 is not reachable"},
				requeue:  startingPoll,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var j journal
			var api client.Client
			var g fakeguest.GuestFns
			if tc.guest != nil {
				g = tc.guest(func() client.Client { return api })
			}
			objs := append([]client.Object{testDot(tc.dot), tc.computer, tokenSecret()}, tc.secrets...)
			r, c := newReconciler(t, recording(&j, g), objs...)
			api = c
			res := reconcileOnce(t, r)
			d := getDot(t, c)
			if diff := cmp.Diff(tc.want.calls, j.take()); diff != "" {
				t.Errorf("%s\nguest calls -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.conds, summarize(d)); diff != "" {
				t.Errorf("%s\nconditions -want +got:\n%s", tc.reason, diff)
			}
			for typ, frag := range tc.want.messages {
				if c := meta.FindStatusCondition(d.Status.Conditions, typ); c == nil || !strings.Contains(c.Message, frag) {
					t.Errorf("%s\n%s message = %q, want it to contain %q", tc.reason, typ, messageOf(c), frag)
				}
			}
			for _, c := range d.Status.Conditions {
				for _, bad := range tc.never {
					if strings.Contains(c.Message, bad) {
						t.Errorf("%s\n%s message %q contains %q", tc.reason, c.Type, c.Message, bad)
					}
				}
			}
			if res.RequeueAfter != tc.want.requeue {
				t.Errorf("%s\nrequeue after %s, want %s", tc.reason, res.RequeueAfter, tc.want.requeue)
			}
		})
	}
}

func messageOf(c *metav1.Condition) string {
	if c == nil {
		return "(no condition)"
	}
	return c.Message
}

// TestReadyProcedureOverTime: what a guest already holds is not pushed again;
// a new QEMU, a rotated key, a new generation, an engine that restarted and
// the event pump's request are.
func TestReadyProcedureOverTime(t *testing.T) {
	var j journal
	engine := fakeguest.NewEngine()
	r, c := newReconciler(t, recording(&j, engine.Guest()), testDot(nil), testComputer(true, 1001), tokenSecret(), defaultKeySecret(defaultKey))
	ctx := context.Background()
	key1 := []string{"secrets key=" + defaultKey + " mcp=map[]"}
	steps := []struct {
		reason string
		before func()
		want   []string
	}{
		{"the first reconcile pushes everything", nil, append(append([]string{}, key1...), "config ", "health")},
		{"a steady reconcile only asks the engine", nil, []string{"health"}},
		{"a rotated key is pushed alone", func() {
			if err := c.Update(ctx, defaultKeySecret("sk-or-rotated-42")); err != nil {
				t.Fatal(err)
			}
		}, []string{"secrets key=sk-or-rotated-42 mcp=map[]", "health"}},
		{"a new generation is pushed alone", func() {
			if err := bumpGeneration(ctx, c); err != nil {
				t.Fatal(err)
			}
		}, []string{"config gen 2", "health"}},
		{"an engine that restarted holds no key: it is noticed by its health", func() {
			engine.Restart(guestclient.Target{Port: 40000, PID: 1001})
		}, []string{"health"}},
		{"... and given everything again", nil, []string{"secrets key=sk-or-rotated-42 mcp=map[]", "config gen 2", "health"}},
		{"the event pump's request (agent.started) pushes everything again", func() {
			r.RequestPush(dotKey)
		}, []string{"secrets key=sk-or-rotated-42 mcp=map[]", "config gen 2", "health"}},
		{"a new QEMU is a new guest", func() {
			comp := &dotsv1.Computer{}
			if err := c.Get(ctx, dotKey, comp); err != nil {
				t.Fatal(err)
			}
			comp.Status.PID = 1002
			if err := c.Status().Update(ctx, comp); err != nil {
				t.Fatal(err)
			}
		}, []string{"secrets key=sk-or-rotated-42 mcp=map[]", "config gen 2", "health"}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		reconcileOnce(t, r)
		if diff := cmp.Diff(st.want, j.take()); diff != "" {
			t.Errorf("%s: guest calls -want +got:\n%s", st.reason, diff)
		}
	}
	got := summarize(getDot(t, c))
	if diff := cmp.Diff(all(metav1.ConditionTrue, dotsv1.KeyPushedReason, dotsv1.ConfigAppliedReason, dotsv1.AgentReadyReason, 2), got); diff != "" {
		t.Errorf("at the end: conditions -want +got:\n%s", diff)
	}
	if p := engine.Pushed(40000, 1002); p.Key != "sk-or-rotated-42" || p.Config == nil || p.Config.Instructions != "gen 2" {
		t.Errorf("the new guest holds key %q and config %+v; want the rotated key and generation 2", p.Key, p.Config)
	}
}

// TestOnlyThisHostsComputers: a Dot whose Computer is another host's, or is
// not the Dot's own, is left alone.
func TestOnlyThisHostsComputers(t *testing.T) {
	tests := map[string]struct {
		reason string
		edit   func(c *dotsv1.Computer)
	}{
		"another host": {"the Computer runs on another host, whose agent pushes", func(c *dotsv1.Computer) { c.Spec.NodeName = "h2" }},
		"not owned":    {"a Computer of the Dot's name it does not own is the Dot reconciler's to report", func(c *dotsv1.Computer) { c.OwnerReferences = nil }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var j journal
			comp := testComputer(true, 1001)
			tc.edit(comp)
			r, c := newReconciler(t, recording(&j, fakeguest.GuestFns{}), testDot(nil), comp, tokenSecret(), defaultKeySecret(defaultKey))
			reconcileOnce(t, r)
			if calls := j.take(); len(calls) > 0 {
				t.Errorf("%s\nguest calls %v; want none", tc.reason, calls)
			}
			if got := summarize(getDot(t, c)); len(got) > 0 {
				t.Errorf("%s\nconditions %v; want none written", tc.reason, got)
			}
		})
	}
}

// noticeLog keeps what the listeners heard.
type noticeLog struct {
	mu      sync.Mutex
	notices []guestnotice.Notice
}

func (l *noticeLog) GuestNotice(n guestnotice.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notices = append(l.notices, n)
}

// TestNotices: after every reconcile the listeners hear whether the Dot has
// a guest here and whether the READY procedure completed on it.
func TestNotices(t *testing.T) {
	// The target is the VM's record: its QEMU's start time and boot id
	// reach the listener rule with the pid and the port.
	target := guestclient.Target{Port: 40000, PID: 1001, Token: testToken, StartTicks: testStartTicks(1001), BootID: testBootID}
	starting := fakeguest.GuestFns{HealthFn: func(context.Context, guestclient.Target) (protocol.Health, error) {
		h := fakeguest.ReadyHealth()
		h.Status = protocol.HealthStarting
		return h, nil
	}}
	tests := map[string]struct {
		reason   string
		objs     []client.Object
		computer *dotsv1.Computer
		guest    fakeguest.GuestFns
		want     guestnotice.Notice
	}{
		"ready": {reason: "the procedure completed: the guest is READY",
			objs: []client.Object{testDot(nil), tokenSecret(), defaultKeySecret(defaultKey)}, computer: testComputer(true, 1001),
			want: guestnotice.Notice{Key: dotKey, DotUID: "uid-dot", Target: target, Ready: true}},
		"engine starting": {reason: "a guest whose engine is not ready yet is there, and not READY",
			objs: []client.Object{testDot(nil), tokenSecret(), defaultKeySecret(defaultKey)}, computer: testComputer(true, 1001), guest: starting,
			want: guestnotice.Notice{Key: dotKey, DotUID: "uid-dot", Target: target}},
		"no key": {reason: "a guest that waits for its key is there, and not READY",
			objs: []client.Object{testDot(nil), tokenSecret()}, computer: testComputer(true, 1001),
			want: guestnotice.Notice{Key: dotKey, DotUID: "uid-dot", Target: target}},
		"computer not ready": {reason: "a Computer not RUNNING and Ready has no guest to reach",
			objs: []client.Object{testDot(nil), tokenSecret(), defaultKeySecret(defaultKey)}, computer: testComputer(false, 1001),
			want: guestnotice.Notice{Key: dotKey}},
		"another host": {reason: "another host's Computer is not this agent's guest",
			objs:     []client.Object{testDot(nil), tokenSecret(), defaultKeySecret(defaultKey)},
			computer: func() *dotsv1.Computer { c := testComputer(true, 1001); c.Spec.NodeName = "h2"; return c }(),
			want:     guestnotice.Notice{Key: dotKey}},
		"dot gone": {reason: "a Dot that is gone has no guest",
			objs: []client.Object{tokenSecret()}, computer: testComputer(true, 1001),
			want: guestnotice.Notice{Key: dotKey}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, _ := newReconciler(t, tc.guest, append(tc.objs, tc.computer)...)
			var heard noticeLog
			r.Listeners = []guestnotice.Listener{&heard}
			reconcileOnce(t, r)
			if diff := cmp.Diff([]guestnotice.Notice{tc.want}, heard.notices); diff != "" {
				t.Errorf("%s\nnotices -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// A guest that just booted answers before its engine listens: the first
// tries come soon, then less and less often, never rarer than retryPoll.
func TestRetryWait(t *testing.T) {
	want := map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 4: 2 * time.Second, 5: 4 * time.Second, 6: retryPoll, 40: retryPoll}
	for n, d := range want {
		if got := retryWait(n); got != d {
			t.Errorf("retryWait(%d) = %s; want %s", n, got, d)
		}
	}
}

// TestEngineNotUpYet: a guest whose dot-agentd answers while its engine
// does not listen yet (502 agent_unavailable) is one that just booted or
// woke, and the Dot's first answer waits on the push: it is asked again
// every enginePoll, uncounted, for enginePollFor, then as any failure.
// Any other failure doubles from firstRetry as before, and a guest that
// became ready starts the window afresh at its next start.
func TestEngineNotUpYet(t *testing.T) {
	var j journal
	notUp := &guestclient.StatusError{Method: http.MethodPost, Path: "/v1/agent/secrets", Status: http.StatusBadGateway, Code: protocol.ErrAgentUnavailable}
	other := &guestclient.StatusError{Method: http.MethodPost, Path: "/v1/agent/secrets", Status: http.StatusBadGateway, Code: "bad_gateway"}
	var answer error
	guest := recording(&j, fakeguest.GuestFns{SecretsFn: func(context.Context, guestclient.Target, protocol.SecretsRequest) error { return answer }})
	r, _ := newReconciler(t, guest, testDot(nil), testComputer(true, 1001), tokenSecret(), defaultKeySecret(defaultKey))
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	steps := []struct {
		reason  string
		advance time.Duration
		answer  error
		want    time.Duration
	}{
		{"the engine does not listen yet: asked again soon", 0, notUp, enginePoll},
		{"and again, uncounted", enginePoll, notUp, enginePoll},
		{"still within the window", enginePollFor - 2*enginePoll, notUp, enginePoll},
		{"past the window it is a failure like any other", 2 * enginePoll, notUp, firstRetry},
		{"and the next doubles", firstRetry, notUp, 2 * firstRetry},
		{"the engine answers: ready", time.Second, nil, steadyPoll},
		{"the guest's next start is given the window afresh", time.Minute, notUp, enginePoll},
		{"a failure of another kind is counted from the first wait", enginePoll, other, firstRetry},
	}
	for _, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		answer = st.answer
		if got := reconcileOnce(t, r).RequeueAfter; got != st.want {
			t.Errorf("%s: requeue after %s; want %s", st.reason, got, st.want)
		}
		if st.answer == nil {
			// The guest stops: the next one holds nothing.
			r.forget(dotKey)
		}
	}
}

// TestTargetIsTheVMRecord: every guest this agent reaches is built from the
// VM's own record, with the QEMU's start time and boot id, and a record
// that cannot be read, or that names another QEMU than the Computer's
// status, is refused: nothing is pushed and the listeners hear of no
// guest, never a target proved with less.
func TestTargetIsTheVMRecord(t *testing.T) {
	objs := func() []client.Object {
		return []client.Object{testDot(nil), tokenSecret(), defaultKeySecret(defaultKey), testComputer(true, 1001)}
	}
	tests := map[string]struct {
		reason     string
		vms        func(c client.Reader) VMs
		wantTarget guestclient.Target
		wantCalls  bool
		wantMsg    string
	}{
		"the record": {reason: "port, pid, start time and boot id from the record, with the Computer's token",
			vms:        func(c client.Reader) VMs { return recordsOf(c) },
			wantTarget: guestclient.Target{Port: 40000, PID: 1001, Token: testToken, StartTicks: testStartTicks(1001), BootID: testBootID},
			wantCalls:  true},
		"unreadable": {reason: "a record that cannot be read is refused",
			vms: func(client.Reader) VMs {
				return records(func(context.Context, home.VMID, string) (guestclient.Target, error) {
					return guestclient.Target{}, errors.New("qemu.json does not parse")
				})
			},
			wantMsg: "qemu.json does not parse"},
		"without identity": {reason: "a record without the QEMU's start time is refused by the driver, and so here",
			vms: func(client.Reader) VMs {
				return records(func(context.Context, home.VMID, string) (guestclient.Target, error) {
					return guestclient.Target{}, fmt.Errorf("%w: the record of QEMU pid 1001 does not give its start time and boot id", guestclient.ErrGuestUnproven)
				})
			},
			wantMsg: "does not give its start time"},
		"another QEMU": {reason: "a record naming another QEMU than the status is not pushed to until they agree",
			vms: func(client.Reader) VMs {
				return records(func(_ context.Context, _ home.VMID, token string) (guestclient.Target, error) {
					return guestclient.Target{Port: 40000, PID: 2002, Token: token, StartTicks: testStartTicks(2002), BootID: testBootID}, nil
				})
			},
			wantMsg: "names QEMU pid 2002 on port 40000, the Computer's status pid 1001"},
		"no driver": {reason: "a host agent without a driver reaches no guest",
			vms:     func(client.Reader) VMs { return nil },
			wantMsg: "no VM driver"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var called []guestclient.Target
			seen := func(tg guestclient.Target) {
				mu.Lock()
				defer mu.Unlock()
				called = append(called, tg)
			}
			guest := fakeguest.GuestFns{
				SecretsFn: func(_ context.Context, tg guestclient.Target, _ protocol.SecretsRequest) error { seen(tg); return nil },
				ConfigFn:  func(_ context.Context, tg guestclient.Target, _ protocol.RuntimeConfig) error { seen(tg); return nil },
				HealthFn: func(_ context.Context, tg guestclient.Target) (protocol.Health, error) {
					seen(tg)
					return fakeguest.ReadyHealth(), nil
				},
			}
			r, c := newReconciler(t, guest, objs()...)
			r.VMs = tc.vms(c)
			var heard noticeLog
			r.Listeners = []guestnotice.Listener{&heard}
			res := reconcileOnce(t, r)

			want := guestnotice.Notice{Key: dotKey}
			if tc.wantCalls {
				want = guestnotice.Notice{Key: dotKey, DotUID: "uid-dot", Target: tc.wantTarget, Ready: true}
			}
			if diff := cmp.Diff([]guestnotice.Notice{want}, heard.notices); diff != "" {
				t.Errorf("%s\nnotices -want +got:\n%s", tc.reason, diff)
			}
			for _, tg := range called {
				if tg != tc.wantTarget {
					t.Errorf("%s: the guest was called with %+v, want %+v", tc.reason, tg, tc.wantTarget)
				}
			}
			if tc.wantCalls != (len(called) > 0) {
				t.Errorf("%s: %d calls to the guest, want calls: %v", tc.reason, len(called), tc.wantCalls)
			}
			if tc.wantMsg == "" {
				return
			}
			if res.RequeueAfter == 0 {
				t.Errorf("%s: a refused record is not looked at again (result %+v)", tc.reason, res)
			}
			agent := meta.FindStatusCondition(getDot(t, c).Status.Conditions, dotsv1.AgentReadyCondition)
			if agent == nil || agent.Status != metav1.ConditionFalse || agent.Reason != dotsv1.ComputerNotReadyReason || !strings.Contains(agent.Message, tc.wantMsg) {
				t.Errorf("%s: AgentReady = %+v, want False %s saying %q", tc.reason, agent, dotsv1.ComputerNotReadyReason, tc.wantMsg)
			}
		})
	}
}
