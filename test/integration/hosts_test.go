package integration

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// secondHost is a second host agent of the suite, on its own fake host,
// that a test can stop and start again.
type secondHost struct {
	name string
	host *fake.Host
	// guest, when set, is its guests' engines (the in-memory fake); the
	// real guest client otherwise, which reaches none of the fake VMs.
	guest  agent.Guest
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *secondHost) start() {
	GinkgoHelper()
	mgr, err := agent.NewManager(agent.Options{
		Config:            cp.Config,
		HostName:          s.name,
		Home:              cp.Home,
		Driver:            s.host,
		Accelerator:       dotsv1.AcceleratorTCG,
		QEMUVersion:       "fake",
		Facts:             roomyMachine(s.host),
		HeartbeatInterval: time.Second,
		Log:               testLog.WithName(s.name),
		Guest:             s.guest,
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(suiteCtx)
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(s.done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
}

// stop ends the agent as a kill would: its Lease is simply not renewed.
func (s *secondHost) stop() {
	s.cancel()
	<-s.done
}

func computerOn(host string, strategy dotsv1.RunStrategy, ns string) *dotsv1.Computer {
	GinkgoHelper()
	c := &dotsv1.Computer{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-" + rand.String(6), Namespace: ns},
		Spec: dotsv1.ComputerSpec{
			CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
			RunStrategy: strategy, NodeName: host,
		},
	}
	Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
	return c
}

func readyStatus(obj patch.Object) metav1.ConditionStatus {
	c := meta.FindStatusCondition(obj.GetConditions(), dotsv1.ReadyCondition)
	if c == nil {
		return ""
	}
	return c.Status
}

var _ = Describe("Hosts", Ordered, func() {
	var b *secondHost
	var ns string

	BeforeAll(func() {
		b = &secondHost{name: "fake-host-b", host: fake.NewHost()}
		b.start()
		// Gone for good afterwards, so that later specs place nothing on a
		// host whose agent no longer runs.
		DeferCleanup(func() {
			b.stop()
			_ = k8sClient.Delete(context.Background(), &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: b.name}})
		})
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hosts-" + rand.String(5)}}
		Expect(k8sClient.Create(suiteCtx, n)).To(Succeed())
		ns = n.Name
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), n) })
		Eventually(func(g Gomega) {
			h := &dotsv1.Host{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: b.name}, h)).To(Succeed())
			g.Expect(readyStatus(h)).To(Equal(metav1.ConditionTrue))
			g.Expect(h.Status.Images).To(HaveLen(2))
		}).Should(Succeed())
	})

	It("registers each host with its capacity, images and a Lease", func() {
		h := &dotsv1.Host{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: b.name}, h)).To(Succeed())
		Expect(h.Status.Allocatable.CPU).To(BeEquivalentTo(64))
		Expect(h.Status.Accelerator).To(Equal(dotsv1.AcceleratorTCG))
		Expect(meta.IsStatusConditionFalse(h.Status.Conditions, dotsv1.MemoryPressureCondition)).To(BeTrue())
		Expect(meta.IsStatusConditionFalse(h.Status.Conditions, dotsv1.DiskPressureCondition)).To(BeTrue())
		l := &metav1.PartialObjectMetadata{}
		l.SetGroupVersionKind(coordinationLeaseGVK)
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: b.name}, l)).To(Succeed())
	})

	It("acts on a start at once while 20 other VMs take a minute to power off", func() {
		var stopping []*dotsv1.Computer
		for range 20 {
			stopping = append(stopping, computerOn(b.name, dotsv1.RunAlways, ns))
		}
		waiting := computerOn(b.name, dotsv1.RunHalted, ns)
		for _, c := range stopping {
			eventuallyComputer(c, runningAndReady)
		}
		eventuallyComputer(waiting, stoppedFor(dotsv1.StopUser))

		b.host.SetPoweroffTakes(time.Minute)
		DeferCleanup(func() { b.host.SetPoweroffTakes(0) })
		var wg sync.WaitGroup
		for _, c := range stopping {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				patchComputer(c, func(c *dotsv1.Computer) { c.Spec.RunStrategy = dotsv1.RunHalted })
			}()
		}
		wg.Wait()
		asked := time.Now()
		patchComputer(waiting, func(c *dotsv1.Computer) { c.Spec.RunStrategy = dotsv1.RunAlways })
		Eventually(func() bool {
			for _, id := range b.host.Running() {
				if id == idOf(waiting) {
					return true
				}
			}
			return false
		}, "10s", "10ms").Should(BeTrue(), "the start waits for no stop")
		took := time.Since(asked)
		AddReportEntry("start acted on while 20 VMs power off", took.String())
		fmt.Fprintf(GinkgoWriter, "start acted on %s after runStrategy Always, while 20 VMs power off\n", took)

		for _, c := range stopping {
			got := eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
				g.Expect(c.Status.State).To(Equal(dotsv1.ComputerStopping))
			})
			Expect(got.Status.StopDeadline).NotTo(BeNil())
		}
		for _, c := range append(stopping, waiting) {
			Expect(k8sClient.Delete(suiteCtx, c)).To(Succeed())
		}
	})

	It("marks a host whose Lease lapsed Unknown with its Computers, leaves the other host's alone, and recovers when the agent is back", func() {
		onB := computerOn(b.name, dotsv1.RunAlways, ns)
		onA := computerOn(fakeHostName, dotsv1.RunAlways, ns)
		DeferCleanup(func() {
			_ = k8sClient.Delete(context.Background(), onB)
			_ = k8sClient.Delete(context.Background(), onA)
		})
		before := eventuallyComputer(onB, runningAndReady)
		eventuallyComputer(onA, runningAndReady)

		b.stop()
		stopped := time.Now()
		unknown := eventuallyComputer(onB, func(g Gomega, c *dotsv1.Computer) {
			r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Status).To(Equal(metav1.ConditionUnknown))
			g.Expect(r.Reason).To(Equal(dotsv1.HostUnreachableReason))
		}, "50s", "250ms")
		fmt.Fprintf(GinkgoWriter, "Computer Unknown %s after its agent stopped\n", time.Since(stopped))
		Expect(unknown.Status.PID).To(Equal(before.Status.PID), "nothing is moved or stopped")
		h := &dotsv1.Host{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: b.name}, h)).To(Succeed())
		Expect(readyStatus(h)).To(Equal(metav1.ConditionUnknown))
		a := &dotsv1.Computer{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(onA), a)).To(Succeed())
		Expect(readyStatus(a)).To(Equal(metav1.ConditionTrue), "the other host's Computers are untouched")

		b.start()
		back := eventuallyComputer(onB, runningAndReady)
		Expect(back.Status.PID).To(Equal(before.Status.PID), "the VM is adopted, not started again")
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: b.name}, h)).To(Succeed())
			g.Expect(readyStatus(h)).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})
})

var _ = Describe("A host deleted for good", func() {
	It("lets its Computers be deleted, saying their disks were not cleaned", func() {
		c := &secondHost{name: "fake-host-gone", host: fake.NewHost()}
		c.start()
		DeferCleanup(c.stop)
		vm := computerOn(c.name, dotsv1.RunAlways, "default")
		eventuallyComputer(vm, runningAndReady)
		c.stop()

		By("deleting its Computer while the agent is away: it waits for the host")
		Expect(k8sClient.Delete(suiteCtx, vm)).To(Succeed())
		Consistently(func() error {
			return k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(vm), &dotsv1.Computer{})
		}, "2s").Should(Succeed())

		By("kubectl delete host: the machine is gone, the Computer goes")
		Expect(k8sClient.Delete(suiteCtx, &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: c.name}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(vm), &dotsv1.Computer{}))
		}).Should(BeTrue())
		Eventually(func() []string { return eventReasons(vm) }).Should(ContainElement("DiskNotCleaned"))
		Expect(isRunningOnHostOf(c.host, vm)).To(BeTrue(), "nothing on the machine was touched")
	})
})

func isRunningOnHostOf(h *fake.Host, c *dotsv1.Computer) bool {
	for _, id := range h.Running() {
		if id == idOf(c) {
			return true
		}
	}
	return false
}

var _ = Describe("Two writers of a Dot's conditions", func() {
	It("never undo each other", func() {
		d := createDot("default")
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), d) })
		// A stand-in for the guest link: it owns ConfigApplied and writes it
		// for every generation it sees, while the Dot reconciler writes its
		// own conditions for the same changes.
		link := patch.Writer{Name: "guest-link-stand-in", Conditions: []string{dotsv1.ConfigAppliedCondition}}
		writeApplied := func() error {
			cur := &dotsv1.Dot{}
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), cur); err != nil {
				return err
			}
			h := patch.NewHelper(k8sClient, link, cur)
			patch.SetCondition(cur, time.Now(), dotsv1.ConfigAppliedCondition, metav1.ConditionTrue, dotsv1.ConfigAppliedReason, fmt.Sprintf("generation %d", cur.Generation))
			_, err := h.Patch(suiteCtx, cur)
			return err
		}
		for i := range 10 {
			patchDot := &dotsv1.Dot{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), patchDot)).To(Succeed())
			base := patchDot.DeepCopy()
			patchDot.Spec.Instructions = fmt.Sprintf("change %d", i)
			Expect(k8sClient.Patch(suiteCtx, patchDot, client.MergeFrom(base))).To(Succeed())
			Eventually(writeApplied).Should(Succeed())
		}
		Eventually(func(g Gomega) {
			got := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), got)).To(Succeed())
			applied := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ConfigAppliedCondition)
			g.Expect(applied).NotTo(BeNil(), "the stand-in's condition survives the reconciler's writes")
			g.Expect(applied.Message).To(Equal(fmt.Sprintf("generation %d", got.Generation)))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, dotsv1.ComputerReadyCondition)).NotTo(BeNil(), "the reconciler's conditions survive the stand-in's writes")
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		}).Should(Succeed())
	})
})

var coordinationLeaseGVK = coordinationv1.SchemeGroupVersion.WithKind("Lease")
