package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultShutdownTimeout bounds how long the manager waits for running
// reconciles when the server stops.
const defaultShutdownTimeout = 10 * time.Second

// concurrentReconciles is how many objects of one kind are reconciled at
// once: a reconcile is a few API writes, and one worker made 1000 Dots wait
// minutes for their Computers.
const concurrentReconciles = 4

func ptrDuration(d time.Duration) *time.Duration { return &d }

// setCondition sets one condition with the object's generation. Its
// LastTransitionTime changes only when the status does.
func setCondition(conds *[]metav1.Condition, generation int64, now time.Time, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}
