package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// AllCommand runs every step of setup --all, and continues a run that
// stopped (ref 11.4).
const AllCommand = "invisible-dots setup --all"

// Step is one step of setup --all: the code of the command that owns it, run
// as a function.
type Step struct {
	// Name says what the step makes ready ("the host's packages").
	Name string
	// Command is the command that owns the step: what a person runs to do
	// it alone.
	Command string
	// Done says cheaply that nothing is left to do, and what it found. Nil:
	// the step always runs (its command skips what is done by itself). An
	// error only means it could not tell: the step runs.
	Done func(ctx context.Context) (detail string, done bool, err error)
	// Run does the step.
	Run func(ctx context.Context) error
}

// StepError is a step that failed or was stopped: nothing after it ran.
type StepError struct {
	// N is the step's number, from 1, of Of.
	N, Of int
	Step  Step
	Err   error
	// Stopped: the run was asked to stop (Ctrl-C), not a failure.
	Stopped bool
}

func (e *StepError) Error() string {
	if e.Stopped {
		return fmt.Sprintf("setup --all stopped at step %d of %d (%s); nothing after it ran: run %s again to continue", e.N, e.Of, e.Step.Name, AllCommand)
	}
	return fmt.Sprintf("step %d of %d (%s: %s) failed: %v\nnothing after it ran; fix that, then run again to continue: %s", e.N, e.Of, e.Step.Name, e.Step.Command, e.Err, AllCommand)
}

func (e *StepError) Unwrap() error { return e.Err }

// LeftError is a step this binary cannot do for the person: RunAll says what
// to run instead and goes on with the next step, which does not need it.
type LeftError struct {
	// What is the command to run, and why.
	What string
}

func (e *LeftError) Error() string { return e.What }

// ExitCode is 130 for a run stopped by Ctrl-C, 1 for a failed step (ref 11.4).
func (e *StepError) ExitCode() int {
	if e.Stopped {
		return 130
	}
	return 1
}

// RunAll runs the steps in order, skipping those already done, so the same
// call continues a run that stopped. A step that returns a *LeftError is
// said again at the end, and the run goes on. The first step that fails ends the run
// with a *StepError naming the command to run again. A cancelled ctx (Ctrl-C)
// stops the step that runs (each step's own command stops cleanly on it) and
// ends the run before the next one.
func RunAll(ctx context.Context, out io.Writer, steps []Step) error {
	start := time.Now()
	var leftovers []string
	for i, s := range steps {
		n := i + 1
		if ctx.Err() != nil {
			return &StepError{N: n, Of: len(steps), Step: s, Err: ctx.Err(), Stopped: true}
		}
		if s.Done != nil {
			detail, done, err := s.Done(ctx)
			if ctx.Err() != nil {
				return &StepError{N: n, Of: len(steps), Step: s, Err: ctx.Err(), Stopped: true}
			}
			if err == nil && done {
				fmt.Fprintf(out, "\n[%d/%d] %s: already done (%s)\n", n, len(steps), s.Name, detail)
				continue
			}
			switch {
			case err != nil:
				fmt.Fprintf(out, "\n[%d/%d] %s: could not tell whether it is done (%v); running it\n", n, len(steps), s.Name, err)
			case detail != "":
				fmt.Fprintf(out, "\n[%d/%d] %s: to do (%s)\n", n, len(steps), s.Name, detail)
			}
		}
		fmt.Fprintf(out, "\n[%d/%d] %s: %s\n", n, len(steps), s.Name, s.Command)
		t := time.Now()
		err := s.Run(ctx)
		var left *LeftError
		if errors.As(err, &left) && ctx.Err() == nil {
			fmt.Fprintf(out, "[%d/%d] %s: left to you: %s\n", n, len(steps), s.Name, left.What)
			leftovers = append(leftovers, left.What)
			continue
		}
		if err != nil {
			return &StepError{N: n, Of: len(steps), Step: s, Err: err, Stopped: ctx.Err() != nil || errors.Is(err, context.Canceled)}
		}
		fmt.Fprintf(out, "[%d/%d] %s: done in %s\n", n, len(steps), s.Name, time.Since(t).Round(100*time.Millisecond))
	}
	fmt.Fprintf(out, "\nsetup --all finished in %s\n", time.Since(start).Round(time.Second))
	for _, l := range leftovers {
		fmt.Fprintf(out, "left to you: %s\n", l)
	}
	return nil
}
