package e2e

// Dots asking Dots, end to end: two Dots on the test image with the
// stand-in model. The planner's task asks the helper with delegate_task; the
// helper's task waits for a person's approval (its commands ask), answered
// with kubectl as the Inbox does, and its answer comes back to the
// planner's chat. Cancelling the planner's task cancels the helper's, and
// the helper taking its consent back cancels the open request and tells the
// planner.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	planner = "e2e-planner"
	helper  = "e2e-helper"
	// askHelper starts a task or message that the stand-in model answers
	// with delegate_task, asking the helper for the rest of the line.
	askHelper = "ask the helper to "
	// notedPrefix starts the chat's answer to what came back.
	notedPrefix = "noted: "
)

// delegationModel is scriptedModel, plus: "ask the helper to X" makes a
// delegate_task call of the helper for X, and what comes back of a request
// ([Delegation: ...]) is answered "noted: " and the line.
func delegationModel(req modelRequest) modelAnswer {
	last := len(req.Messages) - 1
	text := req.text(last)
	switch {
	case req.Messages[last].Role == "user" && strings.HasPrefix(text, "[Delegation:"):
		// Every note since the chat last answered, several may come at once.
		var notes []string
		for i := last; i >= 0 && req.Messages[i].Role == "user"; i-- {
			notes = append([]string{strings.SplitN(req.text(i), "\n", 2)[0]}, notes...)
		}
		return modelAnswer{Text: notedPrefix + strings.Join(notes, " | "), Cost: answerCost}
	case req.Messages[last].Role == "user" && strings.Contains(text, askHelper):
		what := strings.TrimSpace(strings.SplitN(text[strings.Index(text, askHelper)+len(askHelper):], "\n", 2)[0])
		args, _ := json.Marshal(map[string]string{"dot": helper, "description": what})
		return modelAnswer{Text: "asking the helper", Calls: [][2]string{{"delegate_task", string(args)}}, Cost: answerCost}
	}
	return scriptedModel(req)
}

func delegationDot(name, exec, canAsk, acceptsFrom string) string {
	m := workDot(name, exec) + "    dots.delegate: allow\n  delegation:\n"
	if canAsk != "" {
		m += "    canAsk: [" + canAsk + "]\n"
	}
	if acceptsFrom != "" {
		m += "    acceptsFrom: [" + acceptsFrom + "]\n"
	}
	return m
}

func TestDelegation(t *testing.T) {
	if testing.Short() {
		t.Skip("boots two VMs under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	w := newWork(t, planner, delegationModel)
	t.Cleanup(func() { cvmKillRecorded(w.home.VM(home.VMID{Namespace: "default", Name: helper})) })
	k := w.k
	k.apply(delegationDot(helper, "ask", "", planner))
	k.apply(delegationDot(planner, "allow", helper, ""))
	k.waitDot(planner, vmReadyTimeout, readyDot)
	k.waitDot(helper, vmReadyTimeout, readyDot)

	// requests are the helper's tasks the planner asked for.
	requests := func() []dotsv1.Task {
		var list dotsv1.TaskList
		out := k.run("get", "tasks", "-l", dotsv1.RequestedByLabel+"="+planner, "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("kubectl get tasks: %v", err)
		}
		return list.Items
	}
	// newRequest waits for a request other than those known.
	newRequest := func(w work, known ...string) dotsv1.Task {
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			for _, r := range requests() {
				if !slices.Contains(known, r.Name) {
					return r
				}
			}
			if time.Now().After(deadline) {
				w.fail("the planner's request never became a task of the helper")
			}
		}
	}
	// chatSays waits for an answer of the planner's chat holding all of want.
	chatSays := func(w work, want ...string) {
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			page, err := w.dots().Messages(context.Background(), "default", planner, wire.MessagesQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page.Messages {
				if m.Role == "assistant" && strings.HasPrefix(m.Text, notedPrefix) && allIn(m.Text, want) {
					return
				}
			}
			if time.Now().After(deadline) {
				var got []string
				for _, m := range page.Messages {
					got = append(got, m.Role+": "+m.Text)
				}
				w.fail("the planner's chat never answered a delegation saying %q; it holds %q", want, got)
			}
		}
	}

	var first dotsv1.Task
	t.Run("a Dot asks another; the receiver's approval is answered; the answer comes back", func(t *testing.T) {
		w := w.on(t)
		parent := w.taskOf(w.cli(time.Minute, "task", "add", planner, askHelper+"run the tests again"))
		first = newRequest(w)
		if rb := first.Spec.RequestedBy; first.Spec.DotName != helper || rb == nil || rb.Dot != planner || rb.Task != parent || rb.Depth != 1 {
			w.fail("request %s: dot %s, requestedBy %+v; want the helper's, asked by %s in %s at depth 1", first.Name, first.Spec.DotName, rb, planner, parent)
		}
		// The helper's command asks: the Approval names the helper and its
		// task, whose requestedBy names the planner (what the Inbox shows).
		approval := w.waitApproval(first.Name, 4*time.Minute)
		if approval.Spec.DotName != helper || approval.Spec.Permission != "computer.exec" {
			w.fail("Approval %s is %s's %s; want the helper's computer.exec", approval.Name, approval.Spec.DotName, approval.Spec.Permission)
		}
		k.run("patch", "approval", approval.Name, "--type", "merge", "-p", `{"spec":{"decision":"approve"}}`)
		got := w.waitTask(first.Name, 3*time.Minute)
		if got.Status.Phase != dotsv1.TaskCompleted || got.Status.Summary != testsPassed {
			w.fail("request %s ended %s with %q %q; want COMPLETED with %q", first.Name, got.Status.Phase, got.Status.Summary, got.Status.Error, testsPassed)
		}
		chatSays(w, "[Delegation: "+helper+", completed]", testsPassed)
		// Each Dot's spend where it happened, shown together on the parent.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			p := w.task(parent)
			if near(p.Status.DelegatedSpentUSD, got.Status.SpentUSD) && p.Status.SpentUSD > 0 {
				break
			}
			if time.Now().After(deadline) {
				w.fail("task %s shows spentUSD %v and delegatedSpentUSD %v; want its own and the request's %v", parent, p.Status.SpentUSD, p.Status.DelegatedSpentUSD, got.Status.SpentUSD)
			}
		}
	})

	t.Run("cancelling the asker's task cancels the request", func(t *testing.T) {
		w := w.on(t)
		parent := w.taskOf(w.cli(time.Minute, "task", "add", planner, askHelper+"run the phone tests"))
		req := newRequest(w, first.Name)
		w.waitApproval(req.Name, 4*time.Minute) // the request works: its command waits for a person
		k.run("patch", "task", parent, "--type", "merge", "-p", `{"spec":{"cancelRequested":true}}`)
		if got := w.waitTask(req.Name, 3*time.Minute); got.Status.Phase != dotsv1.TaskCancelled {
			w.fail("request %s ended %s; want CANCELLED with the task it was asked in", req.Name, got.Status.Phase)
		}
		chatSays(w, "[Delegation: "+helper+", cancelled]", req.Name)
	})

	t.Run("consent taken back mid-task cancels the open request and tells the asker", func(t *testing.T) {
		w := w.on(t)
		known := []string{first.Name}
		for _, r := range requests() {
			known = append(known, r.Name)
		}
		w.cli(time.Minute, "task", "add", planner, askHelper+"run the tests in chat")
		req := newRequest(w, known...)
		w.waitApproval(req.Name, 4*time.Minute)
		k.apply(delegationDot(helper, "ask", "", ""))
		if got := w.waitTask(req.Name, 3*time.Minute); got.Status.Phase != dotsv1.TaskCancelled {
			w.fail("request %s ended %s; want CANCELLED once the helper no longer accepts the planner", req.Name, got.Status.Phase)
		}
		chatSays(w, fmt.Sprintf("%s no longer accepts requests from you", helper))
		// A new request is refused, saying why.
		w.cli(time.Minute, "task", "add", planner, askHelper+"run the tests")
		chatSays(w, "refused", "does not accept requests from you")
	})
}

func allIn(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
