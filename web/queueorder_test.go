package web

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
)

// queueOrderFixture is the dispatcher's order of a set of tasks, as
// internal/lifecycle.NextTask takes them one after another; the web client's
// Queue is checked against it (e2e/queue-order.spec.ts), so the page's
// order cannot drift from the dispatcher's. UPDATE_WEB_TABLES=1 writes it.
const queueOrderFixture = "e2e/queue-order.json"

type fixtureTask struct {
	Name     string `json:"name"`
	Priority int32  `json:"priority"`
	Created  string `json:"created"`
}

func queueOrder() ([]byte, error) {
	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	tasks := []fixtureTask{
		{"low", -5, base.Format(time.RFC3339)},
		{"old", 0, base.Add(time.Second).Format(time.RFC3339)},
		{"b-same-time", 0, base.Add(2 * time.Second).Format(time.RFC3339)},
		{"a-same-time", 0, base.Add(2 * time.Second).Format(time.RFC3339)},
		{"urgent", 50, base.Add(3 * time.Second).Format(time.RFC3339)},
		{"urgent-older", 50, base.Add(-time.Hour).Format(time.RFC3339)},
		{"new", 0, base.Add(time.Minute).Format(time.RFC3339)},
		{"lowest", -100, base.Add(-24 * time.Hour).Format(time.RFC3339)},
	}
	var facts []lifecycle.Task
	for _, t := range tasks {
		at, err := time.Parse(time.RFC3339, t.Created)
		if err != nil {
			return nil, err
		}
		facts = append(facts, lifecycle.Task{Name: t.Name, Phase: dotsv1.TaskPending, Priority: t.Priority, Created: at})
	}
	var order []string
	for len(facts) > 0 {
		next := lifecycle.NextTask(facts, base.Add(time.Hour)).Next
		order = append(order, next)
		facts = slices.DeleteFunc(facts, func(f lifecycle.Task) bool { return f.Name == next })
	}
	out, err := json.MarshalIndent(map[string]any{"tasks": tasks, "order": order}, "", "  ")
	return append(out, '\n'), err
}

func TestQueueOrderFixtureIsTheDispatchers(t *testing.T) {
	want, err := queueOrder()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_WEB_TABLES") == "1" {
		if err := os.WriteFile(queueOrderFixture, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(queueOrderFixture)
	if err != nil {
		t.Fatalf("%v (UPDATE_WEB_TABLES=1 go test ./web writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from internal/lifecycle's order: run UPDATE_WEB_TABLES=1 go test ./web", queueOrderFixture)
	}
}
