// Package integration runs the Ginkgo suites that need a real control plane:
// validation of every bound, server-side apply, the reconcilers and cascading
// deletion. One package, so the API server is linked once.
package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/test/harness"
)

var (
	cp        *harness.ControlPlane
	k8sClient client.Client
	suiteCtx  context.Context
	cancel    context.CancelFunc
	testLog   logr.Logger
	fakeHost  *fake.Host
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Control plane integration")
}

var _ = BeforeSuite(func() {
	testLog = zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true))
	suiteCtx, cancel = context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "idi-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	cp, err = harness.Start(suiteCtx, dir, testLog)
	Expect(err).NotTo(HaveOccurred())
	k8sClient = cp.Client

	// The reconcilers run against the real API server; the host's VMs are
	// the in-memory fake host (named fake: nothing here runs QEMU). The
	// real-VM path is test/e2e's.
	fakeHost = fake.NewHost()
	mgr, err := controllers.NewManager(controllers.Options{
		Config: cp.Config,
		Home:   cp.Home,
		DB:     cp.DB,
		Driver: fakeHost,
		Log:    testLog.WithName("controllers"),
	})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(suiteCtx)).To(Succeed())
	}()
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
})

var _ = AfterSuite(func() {
	if cp != nil {
		cp.Stop(context.Background())
	}
	if cancel != nil {
		cancel()
	}
})

// clientDryRun asks the API server to validate and default without storing.
var clientDryRun = client.CreateOptions{DryRun: []string{metav1.DryRunAll}}
