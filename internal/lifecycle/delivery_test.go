package lifecycle

import (
	"testing"
)

func TestAfterSend(t *testing.T) {
	tests := map[string]struct {
		reason   string
		kind     Kind
		outcome  Outcome
		failures int
		want     RowAction
	}{
		"delivered":          {"a 202 is delivered", KindTask, Delivered, 0, MarkDelivered},
		"unknown resent":     {"a timeout may have arrived: the same id again, not counted", KindTask, Unknown, 2, Resend},
		"task not listening": {"a known failure of a task is counted", KindTask, NotListening, 0, CountFailure},
		"task third failure": {"the third known failure gives the task up", KindTask, NotListening, 2, GiveUpTask},
		"task refused":       {"one refusal gives a task up", KindTask, Refused, 0, GiveUpTask},
		"message failures":   {"a message is never given up, however often it fails", KindMessage, NotListening, 10, CountFailure},
		"message refused":    {"a refused message waits for the next READY", KindMessage, Refused, 0, WaitForReady},
		"decision refused":   {"a decision is never given up either", KindDecision, Refused, 5, WaitForReady},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AfterSend(tc.kind, tc.outcome, tc.failures); got.Action != tc.want {
				t.Errorf("%s\nAfterSend(%s, %d, %d) = %+v; want %s", tc.reason, tc.kind, tc.outcome, tc.failures, got, tc.want)
			}
		})
	}
}
