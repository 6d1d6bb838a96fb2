package integration

import (
	"bytes"
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/approvalonce"
	"github.com/invisible-dots/invisible-dots/internal/cli"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

var _ = Describe("An Approval answered once", func() {
	newApproval := func() *dotsv1.Approval {
		GinkgoHelper()
		a := &dotsv1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "a-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.ApprovalSpec{DotName: "nobody", Tool: "exec", Permission: "computer.exec"},
		}
		Expect(k8sClient.Create(suiteCtx, a)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), a) })
		return a
	}

	It("answers kubectl patch's second answer, another or the same with other words, with a 409 already_resolved naming the first", func() {
		a := newApproval()
		// As kubectl patch writes: a merge patch with no resourceVersion,
		// under its own field manager.
		patch := func(p string) error {
			return k8sClient.Patch(suiteCtx, a.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner("kubectl-patch"))
		}
		Expect(patch(`{"spec":{"decision":"approve","note":"go ahead"}}`)).To(Succeed(), "the first answer is taken")
		answered := &dotsv1.Approval{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), answered)).To(Succeed())

		for _, second := range []string{
			`{"spec":{"decision":"reject"}}`,
			`{"spec":{"decision":null}}`,
			`{"spec":{"decision":"approve","note":"fine"}}`,
			`{"spec":{"decision":"approve","always":true}}`,
		} {
			err := patch(second)
			Expect(apierrors.IsConflict(err)).To(BeTrue(), "%s: want a 409, got %v", second, err)
			Expect(approvalonce.IsAlreadyResolved(err)).To(BeTrue(), "%s: %v", second, err)
			var st apierrors.APIStatus
			Expect(errors.As(err, &st)).To(BeTrue())
			Expect(st.Status().Code).To(BeEquivalentTo(409))
			Expect(st.Status().Reason).To(Equal(metav1.StatusReasonConflict))
			Expect(st.Status().Message).To(And(
				HavePrefix("already_resolved: Approval default/"+a.Name+" was already answered elsewhere: approve, with the note \"go ahead\" (by kubectl-patch at "),
				ContainSubstring("answered once")), second)
		}

		By("a whole update (kubectl edit, replace) is refused alike")
		edited := answered.DeepCopy()
		edited.Spec.Decision = dotsv1.Reject
		Expect(approvalonce.IsAlreadyResolved(k8sClient.Update(suiteCtx, edited))).To(BeTrue())

		By("the same answer again is the Approval as it is: no change is stored")
		Expect(patch(`{"spec":{"decision":"approve"}}`)).To(Succeed())
		now := &dotsv1.Approval{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), now)).To(Succeed())
		Expect(now.Spec).To(Equal(answered.Spec))

		By("a label, and the control plane's status, are still written")
		labelled := now.DeepCopy()
		labelled.Labels = map[string]string{"team": "a"}
		Expect(k8sClient.Patch(suiteCtx, labelled, client.MergeFrom(now))).To(Succeed())
		Eventually(func() dotsv1.ApprovalPhase {
			got := &dotsv1.Approval{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), got)).To(Succeed())
			return got.Status.Phase
		}).Should(Equal(dotsv1.ApprovalApproved))
	})

	It("answers the Dots API's second answer, the same decision included, with a 409 already_resolved naming the first", func() {
		a := newApproval()
		dc, err := dotsclient.New(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		got, err := dc.AnswerApproval(suiteCtx, a.Namespace, a.Name, wire.DecisionApprove, wire.ApprovalAnswer{Note: "go ahead", Always: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(wire.ApprovalAnswered{Namespace: a.Namespace, Name: a.Name, Decision: "approve", Note: "go ahead", Always: true}))

		for _, second := range []string{wire.DecisionApprove, wire.DecisionReject} {
			_, err := dc.AnswerApproval(suiteCtx, a.Namespace, a.Name, second, wire.ApprovalAnswer{})
			Expect(dotsclient.StatusOf(err)).To(Equal(409), "%s: %v", second, err)
			Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeAlreadyResolved))
			Expect(err.Error()).To(And(
				ContainSubstring("Approval default/"+a.Name+" was already answered elsewhere: approve, always"),
				ContainSubstring(`with the note "go ahead"`),
				ContainSubstring("(by invisible-dots-api/")), second)
		}
		now := &dotsv1.Approval{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), now)).To(Succeed())
		Expect(now.Spec.Decision).To(Equal(dotsv1.Approve))

		By("what the route refuses before it writes")
		other := newApproval()
		_, err = dc.AnswerApproval(suiteCtx, other.Namespace, other.Name, wire.DecisionReject, wire.ApprovalAnswer{Always: true})
		Expect(dotsclient.StatusOf(err)).To(Equal(400), "%v", err)
		_, err = dc.AnswerApproval(suiteCtx, other.Namespace, "nobody-asked", wire.DecisionReject, wire.ApprovalAnswer{})
		Expect(dotsclient.StatusOf(err)).To(Equal(404), "%v", err)
		_, err = dc.AnswerApproval(suiteCtx, other.Namespace, other.Name, wire.DecisionReject, wire.ApprovalAnswer{Note: "no\x00"})
		Expect(dotsclient.StatusOf(err)).To(Equal(400), "%v", err)
		Expect(err.Error()).To(ContainSubstring("NUL"))
	})

	It("tells the command line's second answer, the same or another, what the first was, and exits 3", func() {
		a := newApproval()
		run := func(args ...string) (string, error) {
			cmd := cli.NewRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append(args, "--kubeconfig", cp.KubeconfigPath, "-n", a.Namespace))
			cmd.SetContext(suiteCtx)
			err := cmd.Execute()
			return out.String(), err
		}
		out, err := run("reject", a.Name, "--note", "not in the home directory")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("approval " + a.Name + ": reject"))

		for _, second := range [][]string{{"reject", a.Name}, {"approve", a.Name, "--always"}} {
			_, err := run(second...)
			Expect(err).To(HaveOccurred(), "%v", second)
			var coded interface{ ExitCode() int }
			Expect(errors.As(err, &coded)).To(BeTrue(), "%v: %v", second, err)
			Expect(coded.ExitCode()).To(Equal(cli.ExitAlreadyAnswered))
			Expect(err.Error()).To(And(ContainSubstring("already answered: reject"), ContainSubstring(`"not in the home directory"`)), "%v", second)
		}
		got := &dotsv1.Approval{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), got)).To(Succeed())
		Expect(got.Spec.Decision).To(Equal(dotsv1.Reject))
		Expect(got.Spec.Always).To(BeFalse())
	})
})

var _ = Describe("An approval asked for a task that has ended", func() {
	It("is made Expired, never Pending, and its Dot waits for nobody", func() {
		dot := validDot()
		task := newTask(dot, dot.Name+"-t", 0)
		Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
		id := store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
		guest := &guestLog{dot: id}

		Eventually(func() dotsv1.TaskPhase { return taskOf(task).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		tid := string(taskOf(task).UID)
		guest.says(protocol.EventTaskStarted, protocol.TaskStarted{TaskID: tid})
		guest.says(protocol.EventTaskFailed, protocol.TaskFailed{TaskID: tid, Error: "gave up"})
		Eventually(func() dotsv1.TaskPhase { return taskOf(task).Status.Phase }).Should(Equal(dotsv1.TaskFailed))

		// Every state of the Dot's Approvals, from before it is made.
		wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(suiteCtx, &dotsv1.ApprovalList{}, client.InNamespace(dot.Namespace), client.MatchingLabels{dotsv1.DotLabel: dot.Name})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()

		// The guest's request read after its task's end (its events came
		// in one batch, or the request was logged late).
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-late", TaskID: &tid, Tool: "exec",
			Permission: "computer.exec", Reason: "run the build"})
		var seen []dotsv1.ApprovalPhase
		deadline := time.After(30 * time.Second)
	follow:
		for {
			select {
			case e := <-w.ResultChan():
				if e.Type != watch.Added && e.Type != watch.Modified {
					continue
				}
				a := e.Object.(*dotsv1.Approval)
				seen = append(seen, a.Status.Phase)
				if a.Status.Phase == dotsv1.ApprovalExpired {
					break follow
				}
			case <-deadline:
				Fail("the Approval was not made Expired within 30 s; its phases: " + phases(seen))
			}
		}
		Expect(seen).NotTo(ContainElement(dotsv1.ApprovalPending), "phases: %s", phases(seen))
		Consistently(func(g Gomega) {
			select {
			case e := <-w.ResultChan():
				if a, ok := e.Object.(*dotsv1.Approval); ok {
					g.Expect(a.Status.Phase).To(Equal(dotsv1.ApprovalExpired))
				}
			default:
			}
			got := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), got)).To(Succeed())
			g.Expect(got.Status.PendingApprovals).To(BeZero())
			g.Expect(got.Status.Phase).NotTo(Equal(dotsv1.DotWaitingApproval))
		}, "2s").Should(Succeed())
	})
})

func phases(p []dotsv1.ApprovalPhase) string {
	s := ""
	for _, x := range p {
		if s != "" {
			s += ", "
		}
		s += "'" + string(x) + "'"
	}
	return s
}
