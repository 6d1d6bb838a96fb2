// Package integration runs the Ginkgo suites that need a real control plane:
// validation of every bound, server-side apply, the reconcilers and cascading
// deletion. One package, so the API server is linked once.
package integration

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	guestfake "github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/heartbeat"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/channels/port/porttest"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram/telegramtest"
	"github.com/invisible-dots/invisible-dots/internal/store"
	"github.com/invisible-dots/invisible-dots/test/harness"
)

var (
	cp        *harness.ControlPlane
	k8sClient client.Client
	suiteCtx  context.Context
	cancel    context.CancelFunc
	testLog   logr.Logger
	fakeHost  *fake.Host
	// logStore is the control plane's event log and outbox.
	logStore *store.Store
	// fakeEngine is every fake guest's engine: what the guest link pushed.
	fakeEngine *guestfake.Engine
	managers   sync.WaitGroup
	// fakeTelegram is Telegram's Bot API for every Channel of the suite.
	fakeTelegram *telegramtest.FakeBotAPI
	// fakeWhatsApp is the WhatsApp program's side of the socket, and
	// whatsAppLinks the link codes it shows.
	fakeWhatsApp  *porttest.FakeProgram
	whatsAppLinks *port.Links
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
	// Telegram is the fake Bot API (named fake: nothing here reaches
	// Telegram), for the server's credential checks and the hub alike.
	fakeTelegram = telegramtest.New(telegramToken)
	DeferCleanup(fakeTelegram.Close)
	// WhatsApp's program is a fake of its side of the socket (WhatsApp
	// cannot be faked on the wire; the program's own tests are its).
	fakeWhatsApp = porttest.NewFakeProgram(GinkgoT())
	whatsAppLinks = port.NewLinks()
	channelKinds := hub.Kinds{
		"telegram": telegram.Kind(fakeTelegram.URL()),
		"whatsapp": hub.WhatsApp(fakeWhatsApp.Dial, testLog.WithName("whatsapp")),
	}
	cp, err = harness.StartWith(suiteCtx, dir, testLog, harness.Options{Channels: channelKinds, ChannelLinks: whatsAppLinks})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = cp.Client

	// The central controllers and one host agent run against the real API
	// server, as in invisible-dots server; the host's VMs are the in-memory
	// fake host (named fake: nothing here runs QEMU), on a machine with
	// room for every Computer the suite makes. The real-VM path is
	// test/e2e's.
	fakeHost = fake.NewHost()
	logStore = store.New(cp.DB.Pool())
	fakeEngine = guestfake.NewEngine()
	central, err := controllers.NewManager(suiteCtx, controllers.Options{
		Config:       cp.Config,
		Log:          testLog.WithName("controllers"),
		Store:        logStore,
		Channels:     channelKinds,
		ChannelLinks: whatsAppLinks,
	})
	Expect(err).NotTo(HaveOccurred())
	hostAgent, err := agent.NewManager(agent.Options{
		Config:            cp.Config,
		HostName:          fakeHostName,
		Home:              cp.Home,
		Driver:            fakeHost,
		Accelerator:       dotsv1.AcceleratorTCG,
		QEMUVersion:       "fake",
		Facts:             roomyMachine(fakeHost),
		HeartbeatInterval: time.Second,
		Log:               testLog.WithName("agent"),
		// The guests' engines are the in-memory fake too: the guest link
		// pushes to it as to a real one.
		Guest: fakeEngine.Guest(),
		// As in invisible-dots server, the Dots API reaches this host's
		// guests through this agent's endpoint (the default, the loopback).
	})
	Expect(err).NotTo(HaveOccurred())
	for _, m := range []ctrl.Manager{central, hostAgent} {
		managers.Add(1)
		go func() {
			defer GinkgoRecover()
			defer managers.Done()
			Expect(m.Start(suiteCtx)).To(Succeed())
		}()
	}
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
})

var _ = AfterSuite(func() {
	// The managers first (the leader gives its Lease back), then the API
	// server they talk to.
	if cancel != nil {
		cancel()
	}
	managers.Wait()
	if cp != nil {
		cp.Stop(context.Background())
	}
})

// fakeHostName is the Host of the suite's agent.
const fakeHostName = "fake-host"

// roomyMachine is a machine with room for every Computer the suite makes,
// with the fake host's images.
func roomyMachine(h *fake.Host) func(ctx context.Context) (heartbeat.Facts, error) {
	return func(ctx context.Context) (heartbeat.Facts, error) {
		imgs, err := h.Images(ctx)
		return heartbeat.Facts{
			CPUs: 64, MemTotal: 4 << 40, MemAvailable: 4 << 40, DiskTotal: 64 << 40, DiskFree: 64 << 40,
			Accelerator: dotsv1.AcceleratorTCG, QEMUVersion: "fake", Images: imgs,
		}, err
	}
}

// clientDryRun asks the API server to validate and default without storing.
var clientDryRun = client.CreateOptions{DryRun: []string{metav1.DryRunAll}}
