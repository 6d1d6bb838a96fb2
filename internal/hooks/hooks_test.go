package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

const (
	ns          = "team"
	ghSecret    = "gh-secret-0123456789"
	stdSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tokenSecret = "tok-0123456789abcdef"
)

// fixture is a listener over a fake API (a fake client: the Webhooks, their
// Secrets, the Tasks made) with a fake clock.
type fixture struct {
	t      *testing.T
	client client.Client
	clock  *clocktesting.FakeClock
	l      *Listener
	h      http.Handler
}

func webhook(name string, sig dotsv1.WebhookSignature) *dotsv1.Webhook {
	return &dotsv1.Webhook{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: dotsv1.WebhookSpec{
			DotName:   "helper",
			Signature: sig,
			SecretRef: dotsv1.WebhookSecretRef{Name: name + "-webhook"},
			Task:      dotsv1.WebhookTaskTemplate{Description: "Look at {{.title}}", Priority: 5},
		},
	}
}

func secretOf(wh *dotsv1.Webhook, value string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wh.Spec.SecretRef.Name},
		Data:       map[string][]byte{dotsv1.WebhookSecretKey: []byte(value)},
	}
}

// helperOwner is Dot helper as its Webhook's controller.
var helperOwner = metav1.OwnerReference{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: "helper",
	UID: "uid-dot-helper", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}

func newFixture(t *testing.T, o Options) *fixture {
	gh, std, tok := webhook("gh", dotsv1.WebhookGitHub), webhook("std", dotsv1.WebhookStandard), webhook("tok", dotsv1.WebhookToken)
	paused := webhook("paused", dotsv1.WebhookGitHub)
	paused.Spec.Paused = true
	// gh is bound to its Dot, as the Webhook controller binds it; the others
	// are not yet.
	gh.OwnerReferences = []metav1.OwnerReference{helperOwner}
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithObjects(gh, std, tok, paused, secretOf(gh, ghSecret), secretOf(std, stdSecret), secretOf(tok, tokenSecret), secretOf(paused, ghSecret)).
		WithStatusSubresource(&dotsv1.Webhook{}).
		Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	o.Reader, o.SecretReader, o.Client, o.Clock, o.Log = c, c, c, clk, logr.Discard()
	l := New(o)
	return &fixture{t: t, client: c, clock: clk, l: l, h: l.Handler()}
}

// delivery is one request to the listener.
type delivery struct {
	name   string
	header http.Header
	body   []byte
}

func (f *fixture) github(name, id string, body []byte) delivery {
	return delivery{name: name, body: body, header: http.Header{
		"X-Hub-Signature-256": {SignGitHub([]byte(ghSecret), body)}, "X-Github-Delivery": {id}, "Content-Type": {"application/json"},
	}}
}

func (f *fixture) standard(id string, at time.Time, body []byte) delivery {
	sig, err := SignStandard(stdSecret, id, at, body)
	if err != nil {
		f.t.Fatal(err)
	}
	return delivery{name: "std", body: body, header: http.Header{
		"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(at.Unix(), 10)}, "Webhook-Signature": {sig},
	}}
}

func (f *fixture) token(token string, body []byte) delivery {
	return delivery{name: "tok", body: body, header: http.Header{"Authorization": {"Bearer " + token}}}
}

func (f *fixture) send(d delivery) (int, string) {
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, PathPrefix+ns+"/"+d.name, bytes.NewReader(d.body))
	for k, v := range d.header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func (f *fixture) tasks() []dotsv1.Task {
	var list dotsv1.TaskList
	if err := f.client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func TestEachSchemeMakesOneTask(t *testing.T) {
	body := []byte(`{"title":"the build is red"}`)
	cases := map[string]func(f *fixture) delivery{
		"github":   func(f *fixture) delivery { return f.github("gh", "d-1", body) },
		"standard": func(f *fixture) delivery { return f.standard("msg_1", f.clock.Now(), body) },
		"token":    func(f *fixture) delivery { return f.token(tokenSecret, body) },
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Options{})
			del := d(f)
			code, out := f.send(del)
			if code != http.StatusAccepted {
				t.Fatalf("a signed delivery is answered %d %s; want 202", code, out)
			}
			var got Accepted
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("the answer %s is not JSON: %v", out, err)
			}
			tasks := f.tasks()
			if len(tasks) != 1 || tasks[0].Name != got.Task {
				t.Fatalf("the delivery made tasks %v; want the one it answered (%s)", names(tasks), got.Task)
			}
			task := tasks[0]
			want := dotsv1.TaskSpec{
				DotName:     "helper",
				Priority:    5,
				Description: Render("Look at {{.title}}", ns+"/"+del.name, ParsePayload("", body)),
			}
			if diff := cmp.Diff(want, task.Spec); diff != "" {
				t.Errorf("the Task's spec (-want +got):\n%s", diff)
			}
			// Made bound to the Dot when the Webhook is (gh), so the Task
			// controller has no owner to patch in; left to it otherwise.
			wantOwners := []metav1.OwnerReference(nil)
			if del.name == "gh" {
				wantOwners = []metav1.OwnerReference{helperOwner}
			}
			if diff := cmp.Diff(wantOwners, task.OwnerReferences); diff != "" {
				t.Errorf("the Task's owners (-want +got):\n%s", diff)
			}
			if task.Labels[dotsv1.WebhookLabel] != del.name {
				t.Errorf("the Task's labels are %v; want %s=%s", task.Labels, dotsv1.WebhookLabel, del.name)
			}
			if !strings.Contains(task.Spec.Description, UntrustedOpen+"the build is red"+UntrustedClose) {
				t.Errorf("the description %q does not mark the sender's value as untrusted", task.Spec.Description)
			}

			// The sender tries again: the same Task, none made.
			code, out = f.send(del)
			if code != http.StatusAccepted || !strings.Contains(out, `"duplicate":true`) || !strings.Contains(out, got.Task) {
				t.Errorf("the same delivery again is answered %d %s; want 202 with the same task, a duplicate", code, out)
			}
			if n := len(f.tasks()); n != 1 {
				t.Errorf("the same delivery twice made %d tasks; want 1", n)
			}

			f.l.status.flush(context.Background())
			wh := &dotsv1.Webhook{}
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: del.name}, wh); err != nil {
				t.Fatal(err)
			}
			st := wh.Status
			if st.Accepted != 1 || st.Duplicates != 1 || st.Refused != 0 || st.LastTaskName != got.Task || st.LastDeliveryTime == nil {
				t.Errorf("the status is %+v; want 1 accepted, 1 duplicate, the last task %s and its time", st, got.Task)
			}
		})
	}
}

func TestRefusalsAnswerAlike(t *testing.T) {
	body := []byte(`{"title":"x"}`)
	cases := map[string]struct {
		reason    string
		delivery  func(f *fixture) delivery
		wantError string // in the Webhook's status; "" when none has one
	}{
		"bad signature": {
			reason:    "signed with another secret",
			delivery:  func(f *fixture) delivery { d := f.github("gh", "d", body); d.body = []byte(`{"title":"y"}`); return d },
			wantError: errBadSignature.Error(),
		},
		"no signature": {
			reason:    "not signed at all",
			delivery:  func(*fixture) delivery { return delivery{name: "gh", body: body} },
			wantError: errNoSignature.Error(),
		},
		"expired timestamp": {
			reason:    "well signed, six minutes old",
			delivery:  func(f *fixture) delivery { return f.standard("m", f.clock.Now().Add(-6*time.Minute), body) },
			wantError: errOutOfWindow.Error(),
		},
		"oversize body": {
			reason: "well signed, one byte over 1 MiB",
			delivery: func(f *fixture) delivery {
				return f.github("gh", "big", append([]byte(`{"title":"`), bytes.Repeat([]byte("a"), MaxBody)...))
			},
			wantError: errTooLarge.Error(),
		},
		"wrong token": {
			reason:    "a token that is not the secret",
			delivery:  func(f *fixture) delivery { return f.token("nope", body) },
			wantError: errBadSignature.Error(),
		},
		"unknown name": {
			reason:   "no Webhook of that name, signed as if there were",
			delivery: func(f *fixture) delivery { return f.github("nobody", "d", body) },
		},
		"other namespace": {
			reason: "the name exists, in another namespace",
			delivery: func(f *fixture) delivery {
				d := f.github("gh", "d", body)
				d.name = "../other/gh"
				return d
			},
		},
		"paused": {
			reason:    "well signed, to a paused Webhook",
			delivery:  func(f *fixture) delivery { return f.github("paused", "d", body) },
			wantError: "the Webhook is paused",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Options{})
			d := tc.delivery(f)
			code, out := f.send(d)
			if name == "other namespace" {
				// The mux cleans the path: a redirect, as for any path.
				if code == http.StatusAccepted {
					t.Fatalf("%s: answered %d %s", tc.reason, code, out)
				}
				return
			}
			if code != http.StatusUnauthorized || out != refusal {
				t.Errorf("%s: answered %d %q; want 401 %q, the answer of every refusal", tc.reason, code, out, refusal)
			}
			if n := len(f.tasks()); n != 0 {
				t.Errorf("%s: %d tasks made; want none", tc.reason, n)
			}
			if tc.wantError == "" {
				return
			}
			f.l.status.flush(context.Background())
			wh := &dotsv1.Webhook{}
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: d.name}, wh); err != nil {
				t.Fatal(err)
			}
			if wh.Status.Refused != 1 || wh.Status.LastError != tc.wantError {
				t.Errorf("%s: the status says refused=%d lastError=%q; want 1 and %q (for its owner, not the sender)", tc.reason, wh.Status.Refused, wh.Status.LastError, tc.wantError)
			}
		})
	}
}

func TestRotatedSecretWorksAtOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	if code, out := f.send(f.github("gh", "d-1", []byte(`{}`))); code != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s", code, out)
	}
	// As webhook rotate does: the new secret stored, then the Webhook
	// marked.
	sec := &corev1.Secret{}
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gh-webhook"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[dotsv1.WebhookSecretKey] = []byte("rotated-secret")
	if err := f.client.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	wh := &dotsv1.Webhook{}
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gh"}, wh); err != nil {
		t.Fatal(err)
	}
	wh.Annotations = map[string]string{dotsv1.WebhookSecretRotatedAnnotation: "2026-12-05T10:00:01Z"}
	if err := f.client.Update(ctx, wh); err != nil {
		t.Fatal(err)
	}
	if code, _ := f.send(f.github("gh", "d-2", []byte(`{"n":2}`))); code != http.StatusUnauthorized {
		t.Errorf("a delivery signed with the old secret right after the rotation: %d; want 401", code)
	}
	body := []byte(`{"n":3}`)
	d := delivery{name: "gh", body: body, header: http.Header{"X-Hub-Signature-256": {SignGitHub([]byte("rotated-secret"), body)}, "X-Github-Delivery": {"d-3"}}}
	if code, out := f.send(d); code != http.StatusAccepted {
		t.Errorf("a delivery signed with the rotated secret: %d %s; want 202", code, out)
	}
}

func TestSecretChangedBehindItsWebhook(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	if code, out := f.send(f.github("gh", "d-1", []byte(`{}`))); code != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s", code, out)
	}
	// The Secret edited with kubectl, the Webhook not marked.
	sec := &corev1.Secret{}
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gh-webhook"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[dotsv1.WebhookSecretKey] = []byte("edited-secret")
	if err := f.client.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(2 * time.Second)
	body := []byte(`{"n":2}`)
	d := delivery{name: "gh", body: body, header: http.Header{"X-Hub-Signature-256": {SignGitHub([]byte("edited-secret"), body)}, "X-Github-Delivery": {"d-2"}}}
	if code, out := f.send(d); code != http.StatusAccepted {
		t.Errorf("a delivery signed with the new secret: %d %s; want 202 (the secret is read again on a mismatch)", code, out)
	}
	f.clock.Step(secretFresh)
	if code, _ := f.send(f.github("gh", "d-3", []byte(`{"n":3}`))); code != http.StatusUnauthorized {
		t.Errorf("a delivery signed with the old secret %s later: %d; want 401", secretFresh, code)
	}
}

func TestGitHubPingMakesNoTask(t *testing.T) {
	f := newFixture(t, Options{})
	d := f.github("gh", "p-1", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`))
	d.header.Set("X-GitHub-Event", "ping")
	if code, out := f.send(d); code != http.StatusOK || !strings.Contains(out, `"pong":true`) {
		t.Errorf("GitHub's ping: %d %s; want 200 pong", code, out)
	}
	bad := f.github("gh", "p-2", []byte(`{}`))
	bad.header.Set("X-GitHub-Event", "ping")
	bad.body = []byte(`{"x":1}`)
	if code, _ := f.send(bad); code != http.StatusUnauthorized {
		t.Errorf("a ping with a bad signature: %d; want 401 (a ping proves the secret too)", code)
	}
	if n := len(f.tasks()); n != 0 {
		t.Errorf("pings made %d tasks; want none", n)
	}
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t, Options{Rate: 1, Burst: 2})
	var codes []int
	for i := range 3 {
		code, _ := f.send(f.github("gh", "d-"+strconv.Itoa(i), []byte(`{}`)))
		codes = append(codes, code)
	}
	if diff := cmp.Diff([]int{202, 202, 429}, codes); diff != "" {
		t.Errorf("three deliveries at once with a burst of 2 (-want +got):\n%s", diff)
	}
	if n := len(f.tasks()); n != 2 {
		t.Errorf("%d tasks made; want 2", n)
	}
	// A second later one token is back: one more, not two.
	f.clock.Step(time.Second)
	f.l.pruneLimiters()
	if code, _ := f.send(f.github("gh", "d-3", []byte(`{}`))); code != http.StatusAccepted {
		t.Errorf("a second later: %d; want 202", code)
	}
	if code, _ := f.send(f.github("gh", "d-4", []byte(`{}`))); code != http.StatusTooManyRequests {
		t.Errorf("a second later, the second delivery: %d; want 429 (a limiter not yet full is kept)", code)
	}
	// Idle until full: forgotten, nothing left behind.
	f.clock.Step(time.Minute)
	f.l.pruneLimiters()
	if n := len(f.l.limiters); n != 0 {
		t.Errorf("%d limiters kept after a minute idle; want none", n)
	}
}

func TestTaskName(t *testing.T) {
	a, b := webhook("gh", dotsv1.WebhookGitHub), webhook("gh", dotsv1.WebhookGitHub)
	b.UID = "another"
	n1, n2, n3 := TaskName(a, "d"), TaskName(a, "e"), TaskName(b, "d")
	if !strings.HasPrefix(n1, "gh-") || len(n1) != len("gh-")+10 || n1 == n2 || n1 == n3 || TaskName(a, "d") != n1 {
		t.Errorf("TaskName: %s, %s, %s; want gh- and 10 hex digits, the same for the same Webhook and id, another otherwise", n1, n2, n3)
	}
}

func TestListenerStopsWithItsContext(t *testing.T) {
	f := newFixture(t, Options{Address: "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.l.Start(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v after its context ended; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not stop with its context")
	}
}

func TestWrongMethodOrPath(t *testing.T) {
	f := newFixture(t, Options{})
	for _, c := range []struct{ method, path string }{{http.MethodGet, PathPrefix + ns + "/gh"}, {http.MethodPost, "/hooks/v1/gh"}, {http.MethodPost, "/"}} {
		req := httptest.NewRequest(c.method, c.path, nil)
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code == http.StatusAccepted || rec.Code/100 == 5 {
			t.Errorf("%s %s answered %d", c.method, c.path, rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}

func names(tasks []dotsv1.Task) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.Name)
	}
	return out
}
