package lifecycle

import (
	"cmp"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Work is what keeps a Dot awake (ref 9.5, "has work").
type Work struct {
	// DueTask: a PENDING task whose time has come.
	DueTask bool
	// ActiveTask: a RUNNING or WAITING_APPROVAL task (the guest may be in
	// the middle of it).
	ActiveTask bool
	// Undelivered counts outbox rows not yet delivered to the guest.
	Undelivered int
	// NextAutomation is when the Dot's earliest automation is due, as its
	// guest last reported (automation.next_run); nil when none is.
	NextAutomation *time.Time
}

// DefaultWakeLead is how long before an automation is due its sleeping
// computer is started, so that it is READY with some to spare.
const DefaultWakeLead = 90 * time.Second

// automationDue: an automation is due within lead, or already past.
func (w Work) automationDue(now time.Time, lead time.Duration) bool {
	return w.NextAutomation != nil && !w.NextAutomation.After(now.Add(lead))
}

// personWork: work a person gave (a task or something to deliver), which
// wakes even a computer a person stopped.
func (w Work) personWork() bool {
	return w.DueTask || w.ActiveTask || w.Undelivered > 0
}

// KeepsAwake is the one definition of "has work": a task or inbound work
// for the Dot, or an automation due within the lead (a past one included).
func KeepsAwake(w Work, now time.Time, lead time.Duration) bool {
	return w.personWork() || w.automationDue(now, lead)
}

// Facts are what the sleep and wake decision reads of one Dot.
type Facts struct {
	Work     Work
	Strategy dotsv1.RunStrategy
	// State and StopReason are the Computer's.
	State      dotsv1.ComputerState
	StopReason dotsv1.StopReason
	// Phase is the Dot's.
	Phase dotsv1.DotPhase
	// AgentState is the engine's last reported state (IDLE, THINKING, ...).
	AgentState string
	// LastActivity is when the Dot's log last had anything.
	LastActivity time.Time
	// IdleTimeout is the Dot's spec.computer.idleTimeout; zero never sleeps.
	IdleTimeout time.Duration
	WakeLead    time.Duration
	Now         time.Time
}

// Action is what the decision asks for.
type Action string

const (
	// Stay: nothing to do.
	Stay Action = ""
	// Wake: start the stopped computer (a start request; a Halted one is
	// set OnDemand again, since a person's work wakes it).
	Wake Action = "Wake"
	// Sleep: prepare-sleep, then power off with stopReason idle.
	Sleep Action = "Sleep"
)

// Decision is the sleep and wake decision, with why.
type Decision struct {
	Action Action
	Why    string
	// After is when to look again with nothing changed (zero: at the next
	// change only).
	After time.Duration
}

// Decide is the sleep and wake decision for one Dot (ref 9.5).
func Decide(f Facts) Decision {
	lead := cmp.Or(f.WakeLead, DefaultWakeLead)
	awake := KeepsAwake(f.Work, f.Now, lead)
	switch f.State {
	case dotsv1.ComputerStopped:
		switch {
		case f.Work.personWork():
			// A message or a task wakes any stopped computer, a person's
			// stop included; a VM that exited with work starts again at
			// once.
			return Decision{Action: Wake, Why: "it has work"}
		case f.Strategy == dotsv1.RunHalted || f.StopReason == dotsv1.StopUser:
			// A person's stop pauses the automations.
			return Decision{}
		case f.Phase == dotsv1.DotError || f.Phase == dotsv1.DotCreating:
			return Decision{}
		case f.Work.automationDue(f.Now, lead):
			return Decision{Action: Wake, Why: "an automation is due"}
		case f.Work.NextAutomation != nil:
			return Decision{After: f.Work.NextAutomation.Add(-lead).Sub(f.Now)}
		}
		return Decision{}
	case dotsv1.ComputerRunning:
		if f.Strategy != dotsv1.RunOnDemand && f.Strategy != "" {
			return Decision{} // Always never sleeps; Halted is stopping
		}
		if f.IdleTimeout <= 0 {
			return Decision{}
		}
		if awake || f.Phase != dotsv1.DotReady || (f.AgentState != "" && f.AgentState != "IDLE") {
			// Never while it starts (not READY yet) or works. Look again
			// an idleTimeout later all the same: not every end of work is
			// an event the decision hears of (an outbox row's delivery is
			// acknowledged, not logged).
			return Decision{After: f.IdleTimeout}
		}
		if idle := f.Now.Sub(f.LastActivity); idle < f.IdleTimeout {
			return Decision{After: f.IdleTimeout - idle}
		}
		return Decision{Action: Sleep, Why: "idle for " + f.IdleTimeout.String() + " with no work"}
	case dotsv1.ComputerStopping:
		// An idle stop is called off when work arrived meanwhile (ref 9.5):
		// the host does so while its guest was not told to power off yet,
		// and otherwise starts it again once it is down.
		if f.StopReason == dotsv1.StopIdle && awake {
			return Decision{Action: Wake, Why: "work arrived while it was going to sleep"}
		}
	}
	return Decision{}
}
