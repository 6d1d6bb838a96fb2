package dotsapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// TestListEndedTasks: ref 9.6's ended tasks, filtered by the server: the
// statuses asked, ended after finished_after, the latest end first, only
// of the namespaces where the caller may list tasks.
func TestListEndedTasks(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	now := time.Now().UTC().Truncate(time.Second)
	add := func(ns, name string, phase dotsv1.TaskPhase, endedAgo time.Duration) {
		t.Helper()
		task := &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dotsv1.TaskSpec{DotName: "runner", Description: "d"}}
		task.Status.Phase = phase
		if endedAgo >= 0 {
			task.Status.CompletionTime = &metav1.Time{Time: now.Add(-endedAgo)}
		}
		// The test's API server keeps a Task's status as it is made.
		if err := e.client.Create(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	add("team-a", "failed-new", dotsv1.TaskFailed, time.Hour)
	add("team-a", "failed-newest", dotsv1.TaskFailed, time.Minute)
	add("team-a", "failed-old", dotsv1.TaskFailed, 48*time.Hour)
	add("team-a", "done", dotsv1.TaskCompleted, time.Hour)
	add("team-a", "running", dotsv1.TaskRunning, -1)
	add("team-b", "failed-elsewhere", dotsv1.TaskFailed, time.Hour)

	after := now.Add(-24 * time.Hour).Format(time.RFC3339)
	names := func(b []byte) []string {
		var out EndedTasks
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var n []string
		for _, t := range out.Tasks {
			n = append(n, t.Namespace+"/"+t.Name)
		}
		return n
	}
	for _, c := range []struct {
		reason, who, path string
		want              []string
	}{
		{"every namespace, as the admin", "admin", "/dots/v1/tasks?status=FAILED&finished_after=" + after, []string{"team-a/failed-newest", "team-a/failed-new", "team-b/failed-elsewhere"}},
		{"every namespace, as team-a's editor: team-b's are not listed", "editor", "/dots/v1/tasks?status=FAILED&finished_after=" + after, []string{"team-a/failed-newest", "team-a/failed-new"}},
		{"one namespace, two statuses, no time", "viewer", "/dots/v1/namespaces/team-a/tasks?status=failed,completed", []string{"team-a/failed-newest", "team-a/done", "team-a/failed-new", "team-a/failed-old"}},
	} {
		got, b := e.call(t, c.who, http.MethodGet, c.path, "", "")
		if got.Status != http.StatusOK {
			t.Fatalf("%s: %+v %s", c.reason, got, b)
		}
		if n := names(b); len(n) != len(c.want) || (len(n) > 0 && !equal(n, c.want)) {
			t.Errorf("%s: %v, want %v", c.reason, n, c.want)
		}
	}
	for _, c := range []struct {
		reason, who, path string
		want              answer
	}{
		{"a status that is not an end", "admin", "/dots/v1/tasks?status=RUNNING", answer{http.StatusBadRequest, wire.CodeInvalidRequest, "COMPLETED, FAILED and CANCELLED"}},
		{"no status", "admin", "/dots/v1/tasks", answer{http.StatusBadRequest, wire.CodeInvalidRequest, ""}},
		{"a time that does not parse", "admin", "/dots/v1/tasks?status=FAILED&finished_after=yesterday", answer{http.StatusBadRequest, wire.CodeInvalidRequest, "RFC 3339"}},
		{"an unknown parameter", "admin", "/dots/v1/tasks?status=FAILED&dot_id=x", answer{http.StatusBadRequest, wire.CodeInvalidRequest, "unknown query parameter"}},
		{"a namespace the editor has no role in", "editor", "/dots/v1/namespaces/team-b/tasks?status=FAILED", answer{http.StatusForbidden, wire.CodeForbidden, ""}},
	} {
		if got, b := e.call(t, c.who, http.MethodGet, c.path, "", ""); !got.matches(c.want) {
			t.Errorf("%s: got %+v %s, want %+v", c.reason, got, b, c.want)
		}
	}
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
