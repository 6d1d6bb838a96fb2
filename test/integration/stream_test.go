package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
	"github.com/invisible-dots/invisible-dots/test/harness"
)

// streamed follows a live stream and keeps the events keep takes.
type streamed struct {
	mu  sync.Mutex
	got []wire.StreamEvent
	err error
}

func follow(c *dotsclient.Client, o dotsclient.StreamOptions, keep func(wire.StreamEvent) bool) *streamed {
	GinkgoHelper()
	ctx, cancel := context.WithCancel(suiteCtx)
	s := &streamed{}
	events, errs := c.Stream(ctx, o)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if keep == nil || keep(ev) {
				s.mu.Lock()
				s.got = append(s.got, ev)
				s.mu.Unlock()
			}
		}
		err := <-errs
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}()
	DeferCleanup(func() { cancel(); <-done })
	return s
}

func (s *streamed) events() []wire.StreamEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *streamed) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func eventIDs(events []wire.StreamEvent) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func storedEventIDs(events []store.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// logMessages stores n person's messages of the Dot in the log.
func logMessages(s *store.Store, d store.Dot, n int) []store.Event {
	GinkgoHelper()
	var out []store.Event
	for i := range n {
		stored, err := s.AppendEvents(suiteCtx, store.Event{Dot: d, Type: wire.EventMessageUser, Source: store.SourceHost,
			Data: json.RawMessage(fmt.Sprintf(`{"text":"message %d"}`, i))})
		Expect(err).NotTo(HaveOccurred())
		out = append(out, stored...)
	}
	return out
}

func ofUIDs(uids ...string) func(wire.StreamEvent) bool {
	return func(e wire.StreamEvent) bool { return slices.Contains(uids, e.DotUID) }
}

var _ = Describe("The live stream of the Dots API", Ordered, func() {
	var (
		cs         kubernetes.Interface
		nsA, nsB   string
		dotA, dotB *dotsv1.Dot
	)

	BeforeAll(func() {
		var err error
		cs, err = kubernetes.NewForConfig(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		nsA, nsB = newNamespace("stream-a"), newNamespace("stream-b")
		dotA, dotB = createDot(nsA), createDot(nsB)
	})

	It("lets a dots-viewer read a Dot's stream, and shows a person bound only in one namespace nothing of another's", func() {
		viewer := personWithRole(cs, nsA, "sam", "dots-viewer")
		admin, err := dotsclient.New(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		a := store.Dot{Namespace: nsA, Name: dotA.Name, UID: string(dotA.UID)}
		b := store.Dot{Namespace: nsB, Name: dotB.Name, UID: string(dotB.UID)}
		start, err := logStore.LastEventID(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		before := logMessages(logStore, a, 2)

		// The Dot's own log also holds what the controllers write
		// (dot.created...): the person's messages are what is compared.
		messages := func(e wire.StreamEvent) bool { return e.Type == wire.EventMessageUser }
		ofDot := follow(viewer, dotsclient.StreamOptions{Namespace: nsA, Dot: dotA.Name, After: ptr.To(int64(0))}, messages)
		every := follow(viewer, dotsclient.StreamOptions{After: ptr.To(start)}, nil)
		everyAdmin := follow(admin, dotsclient.StreamOptions{After: ptr.To(start)}, ofUIDs(a.UID, b.UID))
		Eventually(func() []int64 { return eventIDs(ofDot.events()) }).Should(Equal(storedEventIDs(before)))

		By("sending what is written next, live, and nothing of namespace b on the viewer's stream of every Dot")
		bs := logMessages(logStore, b, 2)
		as := logMessages(logStore, a, 2)
		want := append(storedEventIDs(before), storedEventIDs(as)...)
		Eventually(func() []int64 { return eventIDs(ofDot.events()) }).Should(Equal(want))
		// The last event written is a's: one of b's would have come first.
		Eventually(func() []int64 {
			var ids []int64
			for _, e := range every.events() {
				if e.Type == wire.EventMessageUser {
					ids = append(ids, e.ID)
				}
			}
			return ids
		}).Should(Equal(want))
		for _, e := range every.events() {
			Expect(e.Namespace).To(Equal(nsA), "the viewer of %s got an event of %s", nsA, e.Namespace)
		}
		all := append(storedEventIDs(before), storedEventIDs(bs)...)
		all = append(all, storedEventIDs(as)...)
		Eventually(func() []int64 {
			var ids []int64
			for _, e := range everyAdmin.events() {
				if e.Type == wire.EventMessageUser {
					ids = append(ids, e.ID)
				}
			}
			return ids
		}).Should(Equal(all))

		By("refusing the viewer the stream of a Dot of namespace b")
		refused := follow(viewer, dotsclient.StreamOptions{Namespace: nsB, Dot: dotB.Name}, nil)
		Eventually(refused.failed).Should(HaveOccurred())
		expectRefused(refused.failed(), http.StatusForbidden, wire.CodeForbidden)
	})

	It("keeps a stream open past the request timeout, and 10 clients resume after the control plane restarts", func() {
		if os.Getenv("HARNESS_DATABASE_URL") != "" {
			Skip("a second control plane needs a database of its own; HARNESS_DATABASE_URL is the suite's")
		}
		dir, err := os.MkdirTemp("", "idr-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		addr, err := harness.FreeAddress()
		Expect(err).NotTo(HaveOccurred())
		// A short request timeout, so that a stream outliving it is seen
		// in seconds.
		const requestTimeout = 3 * time.Second
		opts := harness.Options{Address: addr, RequestTimeout: requestTimeout}
		second, err := harness.StartWith(suiteCtx, dir, testLog.WithName("restarted"), opts)
		Expect(err).NotTo(HaveOccurred())
		running := second
		DeferCleanup(func() {
			if running != nil {
				running.Stop(context.Background())
			}
		})
		// The admin kubeconfig's token and CA outlive a restart; the
		// loopback's token does not.
		cfg, err := clientcmd.BuildConfigFromFlags("", second.KubeconfigPath)
		Expect(err).NotTo(HaveOccurred())
		dot := store.Dot{Namespace: "restarted", Name: "helper", UID: "restarted-" + dotA.Name}
		start, err := store.New(second.DB.Pool()).LastEventID(suiteCtx)
		Expect(err).NotTo(HaveOccurred())

		By("reading one stream on past the request timeout")
		hc, err := rest.HTTPClientFor(cfg)
		Expect(err).NotTo(HaveOccurred())
		readCtx, cancelRead := context.WithTimeout(suiteCtx, 30*time.Second)
		DeferCleanup(cancelRead)
		req, err := http.NewRequestWithContext(readCtx, http.MethodGet, cfg.Host+wire.StreamPath, nil)
		Expect(err).NotTo(HaveOccurred())
		resp, err := hc.Do(req)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(resp.Body.Close)
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		time.Sleep(requestTimeout + time.Second)
		late := logMessages(store.New(second.DB.Pool()), dot, 1)
		lines := bufio.NewScanner(resp.Body)
		lines.Buffer(nil, 1<<20)
		found := false
		for !found && lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var ev wire.StreamEvent
				Expect(json.Unmarshal([]byte(data), &ev)).To(Succeed())
				found = ev.DotUID == dot.UID && ev.ID == late[0].ID
			}
		}
		Expect(found).To(BeTrue(), "the stream ended (%v) before the event written after the request timeout", lines.Err())
		resp.Body.Close()

		By("following the stream with 10 clients")
		var clients []*streamed
		for range 10 {
			c, err := dotsclient.New(cfg)
			Expect(err).NotTo(HaveOccurred())
			clients = append(clients, follow(c, dotsclient.StreamOptions{After: ptr.To(start), Retry: 100 * time.Millisecond}, ofUIDs(dot.UID)))
		}
		want := storedEventIDs(late)
		want = append(want, storedEventIDs(logMessages(store.New(second.DB.Pool()), dot, 20))...)
		for _, c := range clients {
			Eventually(func() []int64 { return eventIDs(c.events()) }).Should(Equal(want))
		}

		By("restarting the control plane on the same database and address")
		running.Stop(context.Background())
		running = nil
		restarted, err := harness.StartWith(suiteCtx, dir, testLog.WithName("restarted"), opts)
		Expect(err).NotTo(HaveOccurred())
		running = restarted
		want = append(want, storedEventIDs(logMessages(store.New(restarted.DB.Pool()), dot, 20))...)
		for i, c := range clients {
			Eventually(func() []int64 { return eventIDs(c.events()) }).Should(Equal(want), "client %d", i)
			Expect(c.failed()).NotTo(HaveOccurred())
		}
	})
})
