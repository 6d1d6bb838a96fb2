package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
)

// TestTaskRunsEndWithoutARun: a task that ended has its completion time
// whether or not a run was opened for it (cancelled while PENDING, or ended
// by the guest before the host's task.created was logged), since the lists
// of ended tasks read that time; its start time is its first run's.
func TestTaskRunsEndWithoutARun(t *testing.T) {
	start := time.Date(2026, 12, 6, 9, 0, 0, 400, time.UTC)
	end := start.Add(90 * time.Second)
	tests := map[string]struct {
		view                  projection.TaskView
		runs                  int
		wantStart, wantFinish time.Time
	}{
		"pending": {view: projection.TaskView{Phase: dotsv1.TaskPending}},
		"ended with no run": {
			view:       projection.TaskView{Phase: dotsv1.TaskFailed, Ended: end},
			wantFinish: end.Truncate(time.Second),
		},
		"ended after a run": {
			view: projection.TaskView{Phase: dotsv1.TaskCompleted, Ended: end, RunTimes: []projection.RunTimes{
				{Number: 1, Started: start, Finished: end, Outcome: string(dotsv1.TaskCompleted)}}},
			runs: 1, wantStart: start.Truncate(time.Second), wantFinish: end.Truncate(time.Second),
		},
		"running": {
			view: projection.TaskView{Phase: dotsv1.TaskRunning, RunTimes: []projection.RunTimes{{Number: 1, Started: start}}},
			runs: 1, wantStart: start.Truncate(time.Second),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			runs, s, c := taskRuns(&tt.view)
			if len(runs) != tt.runs {
				t.Errorf("runs = %d, want %d", len(runs), tt.runs)
			}
			for _, got := range []struct {
				what string
				at   *metav1.Time
				want time.Time
			}{{"start", s, tt.wantStart}, {"completion", c, tt.wantFinish}} {
				var at time.Time
				if got.at != nil {
					at = got.at.Time
				}
				if !at.Equal(got.want) {
					t.Errorf("%s = %v, want %v", got.what, at, got.want)
				}
			}
		})
	}
}
