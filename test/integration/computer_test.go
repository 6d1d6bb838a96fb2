package integration

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/computer"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func newComputer(strategy dotsv1.RunStrategy) *dotsv1.Computer {
	GinkgoHelper()
	c := &dotsv1.Computer{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-" + rand.String(6), Namespace: "default"},
		Spec: dotsv1.ComputerSpec{
			CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
			RunStrategy: strategy,
		},
	}
	Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), c) })
	return c
}

func idOf(c *dotsv1.Computer) home.VMID { return home.VMID{Namespace: c.Namespace, Name: c.Name} }

// eventuallyComputer polls the Computer until check passes and returns it.
func eventuallyComputer(c *dotsv1.Computer, check func(g Gomega, c *dotsv1.Computer), intervals ...any) *dotsv1.Computer {
	GinkgoHelper()
	got := &dotsv1.Computer{}
	Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		check(g, got)
	}, intervals...).Should(Succeed())
	return got
}

func runningAndReady(g Gomega, c *dotsv1.Computer) {
	g.Expect(c.Status.State).To(Equal(dotsv1.ComputerRunning))
	g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, dotsv1.ReadyCondition)).To(BeTrue(), "Ready: %+v", c.Status.Conditions)
	g.Expect(c.Status.PID).To(BeNumerically(">", 0))
	g.Expect(c.Status.GuestPort).To(BeNumerically(">", 0))
}

func stoppedFor(reason dotsv1.StopReason) func(g Gomega, c *dotsv1.Computer) {
	return func(g Gomega, c *dotsv1.Computer) {
		g.Expect(c.Status.State).To(Equal(dotsv1.ComputerStopped))
		g.Expect(c.Status.StopReason).To(Equal(reason))
		g.Expect(c.Status.PID).To(BeZero())
		g.Expect(meta.IsStatusConditionFalse(c.Status.Conditions, dotsv1.ReadyCondition)).To(BeTrue())
	}
}

func isRunningOnHost(c *dotsv1.Computer) bool {
	for _, id := range fakeHost.Running() {
		if id == idOf(c) {
			return true
		}
	}
	return false
}

// eventReasons lists the reasons of the Events regarding a Computer.
func eventReasons(c *dotsv1.Computer) []string {
	list := &eventsv1.EventList{}
	Expect(k8sClient.List(suiteCtx, list, client.InNamespace(c.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Computer" && e.Regarding.Name == c.Name {
			out = append(out, e.Reason)
		}
	}
	return out
}

func patchComputer(c *dotsv1.Computer, mutate func(c *dotsv1.Computer)) {
	GinkgoHelper()
	Eventually(func() error {
		cur := &dotsv1.Computer{}
		if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		base := cur.DeepCopy()
		mutate(cur)
		return k8sClient.Patch(suiteCtx, cur, client.MergeFrom(base))
	}).Should(Succeed())
}

var _ = Describe("The Computer reconciler", func() {
	It("starts an OnDemand Computer at create: RUNNING, Ready, a token Secret, images and Events recorded", func() {
		c := newComputer(dotsv1.RunOnDemand)
		got := eventuallyComputer(c, runningAndReady)
		Expect(got.Status.HostBootID).NotTo(BeEmpty())
		Expect(got.Spec.NodeName).To(Equal(fakeHostName), "placed on the one host")
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.PlacedCondition)).To(BeTrue())
		Expect(got.Status.GoldenImage).To(Equal(fake.DefaultImages[0].Version))
		Expect(got.Status.RuntimeImage).To(Equal(fake.DefaultImages[1].Version))
		Expect(got.Status.StartFailure).To(BeNil())
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.ProvisionedCondition)).To(BeTrue())
		Expect(got.Finalizers).To(ContainElement(dotsv1.ComputerFinalizer))
		Expect(isRunningOnHost(c)).To(BeTrue())

		sec := &corev1.Secret{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: c.Namespace, Name: computer.TokenSecretName(c.Name)}, sec)).To(Succeed())
		Expect(metav1.IsControlledBy(sec, got)).To(BeTrue())
		Expect(len(sec.Data[computer.TokenSecretKey])).To(BeNumerically(">=", 32))

		Eventually(func() []string { return eventReasons(c) }).Should(ContainElements("Started", "StateChanged"))
	})

	It("stops for the person with runStrategy Halted, and starts again when it is lifted", func() {
		c := newComputer(dotsv1.RunOnDemand)
		eventuallyComputer(c, runningAndReady)
		patchComputer(c, func(c *dotsv1.Computer) { c.Spec.RunStrategy = dotsv1.RunHalted })
		eventuallyComputer(c, stoppedFor(dotsv1.StopUser))
		Expect(isRunningOnHost(c)).To(BeFalse())
		Eventually(func() []string { return eventReasons(c) }).Should(ContainElement("Stopped"))

		patchComputer(c, func(c *dotsv1.Computer) { c.Spec.RunStrategy = dotsv1.RunOnDemand })
		got := eventuallyComputer(c, runningAndReady)
		Expect(got.Status.StopReason).To(BeEmpty())
	})

	It("restarts a crashed VM under Always and records the exit", func() {
		c := newComputer(dotsv1.RunAlways)
		first := eventuallyComputer(c, runningAndReady)
		Expect(fakeHost.Crash(idOf(c))).To(Succeed())
		// Noticed by the periodic requeue (no watch on a process).
		eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			runningAndReady(g, c)
			g.Expect(c.Status.PID).NotTo(Equal(first.Status.PID))
		})
		Eventually(func() []string { return eventReasons(c) }).Should(ContainElement("Exited"))
	})

	It("records a crashed OnDemand VM STOPPED/exited and starts it once on a start request", func() {
		c := newComputer(dotsv1.RunOnDemand)
		eventuallyComputer(c, runningAndReady)
		Expect(fakeHost.Crash(idOf(c))).To(Succeed())
		eventuallyComputer(c, stoppedFor(dotsv1.StopExited))
		Consistently(func() bool { return isRunningOnHost(c) }, "2s").Should(BeFalse(), "OnDemand does not restart an exited VM")

		req := time.Now().UTC().Format(time.RFC3339Nano)
		patchComputer(c, func(c *dotsv1.Computer) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, dotsv1.StartRequestedAnnotation, req)
		})
		got := eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			runningAndReady(g, c)
			g.Expect(c.Status.HandledStartRequest).To(Equal(req))
		})
		Expect(got.Status.StopReason).To(BeEmpty())
	})

	It("reboots once on a reboot request", func() {
		c := newComputer(dotsv1.RunAlways)
		first := eventuallyComputer(c, runningAndReady)
		req := time.Now().UTC().Format(time.RFC3339Nano)
		patchComputer(c, func(c *dotsv1.Computer) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, dotsv1.RebootRequestedAnnotation, req)
		})
		second := eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			runningAndReady(g, c)
			g.Expect(c.Status.HandledRebootRequest).To(Equal(req))
			g.Expect(c.Status.PID).NotTo(Equal(first.Status.PID))
		})
		Consistently(func(g Gomega) {
			cur := &dotsv1.Computer{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), cur)).To(Succeed())
			g.Expect(cur.Status.PID).To(Equal(second.Status.PID), "the reboot runs once")
		}, "2s").Should(Succeed())
	})

	It("adopts a running VM when a new reconciler (a restarted server) looks at it, without a second start", func() {
		c := newComputer(dotsv1.RunAlways)
		before := eventuallyComputer(c, runningAndReady)

		// A new reconciler with nothing in memory, as after a server
		// restart, over the same host. Its Start is counted.
		var starts atomic.Int32
		counting := fake.DriverFns{
			ObserveFn: fakeHost.Observe,
			StartFn: func(ctx context.Context, s driver.Spec) (driver.Observation, error) {
				starts.Add(1)
				return fakeHost.Start(ctx, s)
			},
			PoweroffFn: fakeHost.Poweroff,
			KillFn:     fakeHost.Kill,
			DestroyFn:  fakeHost.Destroy,
			HealthFn:   fakeHost.Health,
		}
		restarted := &computer.Reconciler{
			Client: k8sClient, APIReader: k8sClient, Driver: counting, HostName: fakeHostName,
			Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{},
		}
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}

		By("with its status intact")
		_, err := restarted.Reconcile(suiteCtx, req)
		Expect(err).NotTo(HaveOccurred())
		By("and with its state forgotten (a status from before the VM started)")
		patchStatus := func() error {
			cur := &dotsv1.Computer{}
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), cur); err != nil {
				return err
			}
			base := cur.DeepCopy()
			cur.Status.State = dotsv1.ComputerProvisioning
			return k8sClient.Status().Patch(suiteCtx, cur, client.MergeFrom(base))
		}
		Expect(patchStatus()).To(Succeed())
		_, err = restarted.Reconcile(suiteCtx, req)
		Expect(err).NotTo(HaveOccurred())

		Expect(starts.Load()).To(BeZero(), "a running VM is never started again")
		after := eventuallyComputer(c, runningAndReady)
		Expect(after.Status.PID).To(Equal(before.Status.PID))
	})

	It("brings Always Computers back after a host reboot and records OnDemand ones exited", func() {
		always := newComputer(dotsv1.RunAlways)
		onDemand := newComputer(dotsv1.RunOnDemand)
		a0 := eventuallyComputer(always, runningAndReady)
		eventuallyComputer(onDemand, runningAndReady)

		fakeHost.RebootHost()
		eventuallyComputer(always, func(g Gomega, c *dotsv1.Computer) {
			runningAndReady(g, c)
			g.Expect(c.Status.HostBootID).NotTo(Equal(a0.Status.HostBootID))
		})
		eventuallyComputer(onDemand, stoppedFor(dotsv1.StopExited))
	})

	It("keeps a Computer whose image no host has PROVISIONING, saying why, and places it once one has", func() {
		c := &dotsv1.Computer{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-" + rand.String(6), Namespace: "default"},
			Spec: dotsv1.ComputerSpec{
				CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
				RunStrategy: dotsv1.RunAlways, GoldenImage: "20200101-missing",
			},
		}
		Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), c) })
		waiting := eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			g.Expect(c.Status.State).To(Equal(dotsv1.ComputerProvisioning))
			p := meta.FindStatusCondition(c.Status.Conditions, dotsv1.PlacedCondition)
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Reason).To(Equal(dotsv1.NoHostFitsReason))
			g.Expect(p.Message).To(ContainSubstring("host " + fakeHostName + " has no golden image 20200101-missing"))
			r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(dotsv1.NoHostFitsReason))
		})
		Expect(waiting.Spec.NodeName).To(BeEmpty())
		// The recorder writes its Event apart from the status, a moment later.
		Eventually(func() []string { return eventReasons(c) }).Should(ContainElement(dotsv1.NoHostFitsReason))

		patchComputer(c, func(c *dotsv1.Computer) { c.Spec.GoldenImage = fake.DefaultImages[0].Version })
		got := eventuallyComputer(c, runningAndReady, "30s")
		Expect(got.Spec.NodeName).To(Equal(fakeHostName))
	})

	It("records failed starts with a growing backoff and clears them once RUNNING", func() {
		c := &dotsv1.Computer{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-" + rand.String(6), Namespace: "default"},
			Spec: dotsv1.ComputerSpec{
				CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
				RunStrategy: dotsv1.RunAlways,
			},
		}
		fakeHost.SetFailStart(idOf(c), errors.New("qemu-img: the golden image is unreadable"))
		Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), c) })

		failed := eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			g.Expect(c.Status.StartFailure).NotTo(BeNil())
			g.Expect(c.Status.StartFailure.ConsecutiveFailCount).To(BeNumerically(">=", 2))
			g.Expect(c.Status.StartFailure.RetryAfter).NotTo(BeNil())
			g.Expect(c.Status.StartFailure.Message).To(ContainSubstring("unreadable"))
			r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(dotsv1.StartFailedReason))
			p := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ProvisionedCondition)
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Reason).To(Equal(dotsv1.ProvisionFailedReason))
		})
		Expect(failed.Status.State).To(Equal(dotsv1.ComputerProvisioning))
		Expect(isRunningOnHost(c)).To(BeFalse())
		// The second wait is 2²×2 s (+ jitter): the backoff holds the next
		// start at least that long after the second failure.
		Expect(failed.Status.StartFailure.RetryAfter.Time).To(BeTemporally(">", time.Now().Add(-time.Second)))

		fakeHost.SetFailStart(idOf(c), nil)
		got := eventuallyComputer(c, runningAndReady, "60s")
		Expect(got.Status.StartFailure).To(BeNil())
	})

	It("destroys the VM before the Computer goes", func() {
		c := newComputer(dotsv1.RunAlways)
		eventuallyComputer(c, runningAndReady)
		destroys := fakeHost.Calls("Destroy")
		Expect(k8sClient.Delete(suiteCtx, c)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), &dotsv1.Computer{}))
		}).Should(BeTrue())
		Expect(fakeHost.Calls("Destroy")).To(BeNumerically(">", destroys))
		obs, err := fakeHost.Observe(suiteCtx, idOf(c))
		Expect(err).NotTo(HaveOccurred())
		Expect(obs.Provisioned).To(BeFalse(), "the VM's files are gone")
	})

	It("holds the Computer while its VM is in ERROR, saying why", func() {
		c := newComputer(dotsv1.RunAlways)
		eventuallyComputer(c, runningAndReady)
		fakeHost.SetState(idOf(c), driver.Observation{Provisioned: true, State: driver.Error, Problem: "pid 4242 does not listen on its guest port"})
		eventuallyComputer(c, func(g Gomega, c *dotsv1.Computer) {
			g.Expect(c.Status.State).To(Equal(dotsv1.ComputerError))
			r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(dotsv1.VMErrorReason))
			g.Expect(r.Message).To(ContainSubstring("pid 4242"))
		})
		// The fake host's Destroy does not refuse an ERROR VM, so this
		// checks what the reconciler never does: start over an ERROR VM.
		Consistently(func() bool { return isRunningOnHost(c) }, "2s").Should(BeFalse())
		fakeHost.SetState(idOf(c), driver.Observation{Provisioned: true, State: driver.Stopped})
	})
})

var _ = Describe("100 Computers on the fake host", func() {
	// The figure of `make bench` "reconcile time for 100 Computers whose
	// VMs are faked at the host-agent interface", through the real API
	// server and the manager's cache: from the first create to all 100
	// RUNNING and Ready. Reported, not asserted (timings belong to figures).
	It("all reach RUNNING and Ready; the time is reported", func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hundred-" + rand.String(5)}}
		Expect(k8sClient.Create(suiteCtx, ns)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
		startsBefore := fakeHost.Calls("Start")
		began := time.Now()
		for i := range 100 {
			c := &dotsv1.Computer{
				ObjectMeta: metav1.ObjectMeta{Name: "vm-" + strconv.Itoa(i), Namespace: ns.Name},
				Spec: dotsv1.ComputerSpec{CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
					RunStrategy: dotsv1.RunAlways},
			}
			Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			list := &dotsv1.ComputerList{}
			g.Expect(k8sClient.List(suiteCtx, list, client.InNamespace(ns.Name))).To(Succeed())
			ready := 0
			for i := range list.Items {
				if list.Items[i].Status.State == dotsv1.ComputerRunning && meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, dotsv1.ReadyCondition) {
					ready++
				}
			}
			g.Expect(ready).To(Equal(100))
		}, "120s", "100ms").Should(Succeed())
		took := time.Since(began)
		AddReportEntry("100 Computers create-to-Ready (fake host, real API server)", took.String())
		GinkgoWriter.Printf("FIGURE 100 Computers create-to-Ready on the fake host: %s (%s per Computer)\n", took, took/100)
		Expect(fakeHost.Calls("Start") - startsBefore).To(BeNumerically(">=", 100))

		By("deleting them destroys every VM")
		list := &dotsv1.ComputerList{}
		Expect(k8sClient.List(suiteCtx, list, client.InNamespace(ns.Name))).To(Succeed())
		for i := range list.Items {
			Expect(k8sClient.Delete(suiteCtx, &list.Items[i])).To(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.List(suiteCtx, list, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}, "120s").Should(Succeed())
	})
})
