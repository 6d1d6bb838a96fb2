package e2e

// The figures of a Dot at work (`make bench`): the real binary, real QEMU
// under tcg with the test image and the real dot-engine, and a stand-in
// OpenRouter answering at once, so what is measured is the control plane's,
// the host agent's and the engine's own time.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram/telegramtest"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/store"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// instantModel answers every chat message at once.
func instantModel(modelRequest) modelAnswer { return modelAnswer{Text: chatAnswer, Cost: answerCost} }

// BenchmarkDotChat reports, for one Dot (run it with -benchtime 1x; b.N is
// not used):
//   - chat-p50-ms, chat-p99-ms: a message posted to a warm (READY, idle) Dot
//     until its answer is in the log, over 50 messages one after another,
//     read from the log's own timestamps (message.user to
//     message.assistant);
//   - send-p50-ms: of those, from the message's event until the deliverer
//     began its send (the outbox row's sent_at): the control plane and the
//     deliverer alone;
//   - deliver-p50-ms: until the guest took the user.message (its
//     delivered_at: the guest's answer, by the deliverer's clock), the
//     guest's POST /v1/agent/events added;
//   - take-p50-ms, take-p99-ms: of those, from the send's start until the
//     guest's answer (delivered_at less sent_at): dot-agentd and the
//     engine taking the row on the emulated processor, behind QEMU's user
//     network, plus the "sent" acknowledgement's way back to the
//     deliverer (a loopback answer);
//   - to-model-p50-ms: from there until the stand-in model got the turn's
//     request: the engine's turn start inside the guest, on the emulated
//     processor (its native cost is BenchmarkTurnOverhead's);
//   - back-p50-ms, back-p99-ms: from the model's request until the answer
//     was in the log: the stand-in's instant answer, the engine's commit of
//     it (emulated too), the event pump and the control plane's ingest;
//   - overhead-p50-ms, overhead-p99-ms: the round trip less the model and
//     less the engine's turn start (to-model): what our own code adds on
//     the host, with the engine's commit of the answer counted in, so an
//     upper bound. Every time is the host's clock (the database's
//     timestamps and the stand-in's), never the guest's;
//   - overhead-less-take-p50-ms, -p99-ms: the same less take, message by
//     message: the host's own part, with only the engine's commit of the
//     answer still in (emulated, in back);
//   - wake-answer-s: the same for a Dot asleep (stopReason idle), the
//     median of 3;
//   - boot-s: the same image booted by the host's driver alone in the same
//     run, from Start to dot-agentd's health (measured at 1.01 times a bare
//     QEMU boot by BenchmarkStartStopTestImage);
//   - wake-answer/boot: their ratio (target under 1.5).
func BenchmarkDotChat(b *testing.B) {
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		b.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	name := "bench-chat"
	clock := &modelClock{at: map[int]time.Time{}}
	w, dots := readyBenchDotWith(b, name, clock.model)
	k := w.k
	ctx := context.Background()

	// Warm: 50 messages, each answered before the next.
	var warm []time.Duration
	var asked []int64
	for i := range 50 {
		d, id, err := answerTime(ctx, dots, name, fmt.Sprintf("warm message %d", i), time.Minute)
		if err != nil {
			b.Fatalf("message %d: %v\n%s", i, err, w.story())
		}
		warm = append(warm, d)
		asked = append(asked, id)
	}
	var send, deliver, take, toModel, back, overhead, hostOverhead []time.Duration
	for i, dl := range deliveries(b, w.home, asked) {
		modelAt, ok := clock.of(i)
		if !ok {
			b.Fatalf("the stand-in model saw no request for warm message %d", i)
		}
		answered := dl.asked.Add(warm[i])
		send, deliver = append(send, dl.sent.Sub(dl.asked)), append(deliver, dl.delivered.Sub(dl.asked))
		toModel, back = append(toModel, modelAt.Sub(dl.delivered)), append(back, answered.Sub(modelAt))
		overhead = append(overhead, warm[i]-modelAt.Sub(dl.delivered))
		take = append(take, dl.delivered.Sub(dl.sent))
		hostOverhead = append(hostOverhead, overhead[i]-take[i])
	}

	// Asleep: idle after 5 s, then a message wakes it.
	k.apply(idleDot(name, "allow", "5s"))
	var wake []time.Duration
	for i := range 3 {
		k.waitComputer(name, 3*time.Minute, func(c *dotsv1.Computer) bool {
			return c.Status.State == dotsv1.ComputerStopped && c.Status.StopReason == dotsv1.StopIdle
		})
		d, id, err := answerTime(ctx, dots, name, fmt.Sprintf("wake up %d", i), 3*time.Minute)
		if err != nil {
			b.Fatalf("wake %d: %v\n%s", i, err, w.story())
		}
		wake = append(wake, d)
		b.Logf("wake %d: answered %s after the message; %s", i, d.Round(time.Millisecond), wakeSteps(ctx, dots, name, id))
	}
	boot := driverBoot(b)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(percentile(warm, 50)), "chat-p50-ms")
	b.ReportMetric(ms(percentile(warm, 99)), "chat-p99-ms")
	b.ReportMetric(ms(percentile(send, 50)), "send-p50-ms")
	b.ReportMetric(ms(percentile(deliver, 50)), "deliver-p50-ms")
	b.ReportMetric(ms(percentile(take, 50)), "take-p50-ms")
	b.ReportMetric(ms(percentile(take, 99)), "take-p99-ms")
	b.ReportMetric(ms(percentile(toModel, 50)), "to-model-p50-ms")
	b.ReportMetric(ms(percentile(back, 50)), "back-p50-ms")
	b.ReportMetric(ms(percentile(back, 99)), "back-p99-ms")
	b.ReportMetric(ms(percentile(overhead, 50)), "overhead-p50-ms")
	b.ReportMetric(ms(percentile(overhead, 99)), "overhead-p99-ms")
	b.ReportMetric(ms(percentile(hostOverhead, 50)), "overhead-less-take-p50-ms")
	b.ReportMetric(ms(percentile(hostOverhead, 99)), "overhead-less-take-p99-ms")
	b.ReportMetric(percentile(wake, 50).Seconds(), "wake-answer-s")
	b.ReportMetric(boot.Seconds(), "boot-s")
	b.ReportMetric(percentile(wake, 50).Seconds()/boot.Seconds(), "wake-answer/boot")
}

// BenchmarkTelegramChat reports, for one Dot reached from Telegram (a fake
// Bot API on the loopback; run it with -benchtime 1x):
//   - tg-p50-ms, tg-p99-ms: a message given to the fake Bot API until the
//     Dot's answer was sent to the chat, over 50 messages one after another
//     (paced to the 20 a minute a person may send: about 2 minutes);
//   - dot-p50-ms: of those, the log's message.user to message.assistant: the
//     Dot's own time (the stand-in model answers at once);
//   - hub-p50-ms, hub-p99-ms: the rest, per message: the adapter's long poll
//     handing the message over, the hub's write, and its way out to the
//     chat; the overhead the channel adds above the Dot's time.
func BenchmarkTelegramChat(b *testing.B) {
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		b.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	name := "bench-telegram"
	w, dots := readyBenchDot(b, name)
	k := w.k
	ctx := context.Background()
	tg := w.telegram
	w.cliIn(time.Minute, e2eBotToken+"\n", "channel", "add", "telegram", "--dot", name)
	k.run("wait", "--for=jsonpath={.status.state}=connected", "channel/"+name+"-telegram", "--timeout=60s")
	code, err := dots.PairingCode(ctx, "default", name, name+"-telegram")
	if err != nil {
		b.Fatal(err)
	}
	const ada = 4242
	answers := func(text string) []telegramtest.Call {
		var out []telegramtest.Call
		for _, c := range tg.Calls("sendMessage") {
			if strings.HasPrefix(c.Field("text"), text) {
				out = append(out, c)
			}
		}
		return out
	}
	waitFor := func(text string, n int) time.Time {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if got := answers(text); len(got) >= n {
				return got[n-1].At
			}
		}
		var calls []string
		for _, c := range tg.Calls("") {
			calls = append(calls, c.Method+" "+c.Field("text"))
		}
		b.Fatalf("no %q sent to the chat within a minute; Telegram was called:\n%s\nthe Dot's log:\n%s\n%s",
			text, strings.Join(calls, "\n"), w.cli(time.Minute, "logs", name, "--tail", "30"), w.story())
		return time.Time{}
	}
	tg.Say(ada, "Ada", code.Words)
	waitFor("Paired.", 1)

	// A person is held to 10 messages at once, then 20 a minute (the
	// hub's bucket): past the first ones, a message every 3 s.
	var total, dot, hub []time.Duration
	var last time.Time
	for i := range 50 {
		if i >= 8 {
			time.Sleep(time.Until(last.Add(3100 * time.Millisecond)))
		}
		text := fmt.Sprintf("phone message %d", i)
		given := time.Now()
		last = given
		tg.Say(ada, "Ada", text)
		sent := waitFor(chatAnswer, i+1)
		total = append(total, sent.Sub(given))
		page, err := dots.Messages(ctx, "default", name, wire.MessagesQuery{Limit: 10, Order: wire.OrderDesc})
		if err != nil {
			b.Fatal(err)
		}
		var asked, answered *wire.Message
		for j := range page.Messages {
			if m := &page.Messages[j]; m.Role == wire.RoleUser && m.Text == text {
				asked = m
			}
		}
		for j := range page.Messages {
			if m := &page.Messages[j]; asked != nil && m.Role == wire.RoleAssistant && m.InReplyTo == asked.MessageID {
				answered = m
			}
		}
		if answered == nil {
			b.Fatalf("message %d: its answer is not in the log", i)
		}
		own := answered.CreatedAt.Sub(asked.CreatedAt)
		dot = append(dot, own)
		hub = append(hub, sent.Sub(given)-own)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(percentile(total, 50)), "tg-p50-ms")
	b.ReportMetric(ms(percentile(total, 99)), "tg-p99-ms")
	b.ReportMetric(ms(percentile(dot, 50)), "dot-p50-ms")
	b.ReportMetric(ms(percentile(hub, 50)), "hub-p50-ms")
	b.ReportMetric(ms(percentile(hub, 99)), "hub-p99-ms")
}

// readyBenchDot is a Dot name on the test image, READY and never idle, whose
// model answers at once, and the Dots API's client.
func readyBenchDot(b *testing.B, name string) (work, *client.Client) {
	return readyBenchDotWith(b, name, instantModel)
}

// readyBenchDotWith is readyBenchDot with the stand-in model model.
func readyBenchDotWith(b *testing.B, name string, model func(modelRequest) modelAnswer) (work, *client.Client) {
	w := newWork(b, name, model)
	w.k.apply(idleDot(name, "allow", "0s"))
	w.k.waitDot(name, vmReadyTimeout, readyDot)
	return w, w.dots()
}

// answerTime posts text to the Dot and waits for its answer, and returns the
// time from the message's event to the answer's, as the log stamped them,
// and the message's event id.
func answerTime(ctx context.Context, dots *client.Client, dot, text string, timeout time.Duration) (time.Duration, int64, error) {
	accepted, err := dots.PostMessage(ctx, "default", dot, text)
	if err != nil {
		return 0, 0, err
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		page, err := dots.Messages(ctx, "default", dot, wire.MessagesQuery{Limit: 10, Order: wire.OrderDesc})
		if err != nil {
			return 0, 0, err
		}
		var asked, answered *wire.Message
		for i := range page.Messages {
			m := &page.Messages[i]
			if m.EventID == accepted.EventID {
				asked = m
			}
		}
		for i := range page.Messages {
			if m := &page.Messages[i]; asked != nil && m.Role == wire.RoleAssistant && m.InReplyTo == asked.MessageID {
				answered = m
			}
		}
		if answered != nil {
			return answered.CreatedAt.Sub(asked.CreatedAt), accepted.EventID, nil
		}
	}
	return 0, 0, fmt.Errorf("no answer to %q within %s", text, timeout)
}

// wakeSteps says when, after the message of event id, the log saw the
// Computer's states (the control plane's computer.state events).
func wakeSteps(ctx context.Context, dots *client.Client, dot string, id int64) string {
	page, err := dots.Events(ctx, "default", dot, wire.EventsQuery{After: id - 1, Limit: 200})
	if err != nil || len(page.Events) == 0 {
		return fmt.Sprintf("(the log cannot be read: %v)", err)
	}
	asked := page.Events[0].CreatedAt
	var steps []string
	for _, e := range page.Events[1:] {
		switch e.Type {
		case wire.EventComputerState, protocol.EventAgentStarted, protocol.EventMessageAssistant:
			steps = append(steps, fmt.Sprintf("%s %s at +%s", e.Type, e.Data, e.CreatedAt.Sub(asked).Round(time.Millisecond)))
		}
		if e.Type == protocol.EventMessageAssistant {
			break
		}
	}
	return strings.Join(steps, "; ")
}

// delivery is when a message's event was stored, when the send of its
// outbox row began, and when the guest took it.
type delivery struct{ asked, sent, delivered time.Time }

// deliveries reads, from the server's database, the delivery of each
// message's event.
func deliveries(b *testing.B, h home.Layout, events []int64) []delivery {
	b.Helper()
	ctx := context.Background()
	dsn := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/invisible_dots",
		RawQuery: url.Values{"host": {h.Run()}, "sslmode": {"disable"}}.Encode()}
	conn, err := pgx.Connect(ctx, dsn.String())
	if err != nil {
		b.Fatalf("connect to the server's database: %v", err)
	}
	defer conn.Close(ctx)
	var out []delivery
	for _, id := range events {
		var d delivery
		err := conn.QueryRow(ctx, `SELECT e.created_at, i.sent_at, i.delivered_at FROM events e JOIN inbound_events i ON i.id = $2 WHERE e.id = $1`,
			id, store.MessageID(id)).Scan(&d.asked, &d.sent, &d.delivered)
		if err != nil {
			b.Fatalf("read the delivery of message %d: %v", id, err)
		}
		out = append(out, d)
	}
	return out
}

// modelClock is BenchmarkDotChat's stand-in model: it answers at once, as
// instantModel does, and notes when the first request of each warm message
// arrived (the host's clock, as the database's timestamps).
type modelClock struct {
	mu sync.Mutex
	at map[int]time.Time
}

var warmMessageRe = regexp.MustCompile(`warm message (\d+)`)

func (m *modelClock) model(req modelRequest) modelAnswer {
	now := time.Now()
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "user" {
			continue
		}
		if sm := warmMessageRe.FindStringSubmatch(req.text(i)); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			m.mu.Lock()
			if _, seen := m.at[n]; !seen {
				m.at[n] = now
			}
			m.mu.Unlock()
		}
		break
	}
	return instantModel(req)
}

func (m *modelClock) of(n int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[n]
	return t, ok
}

// driverBoot boots the test image with the host's QEMU driver alone, in a
// home of its own, and returns the time from Start until dot-agentd answers
// its health through the proven channel (asked every 100 ms).
func driverBoot(b *testing.B) time.Duration {
	b.Helper()
	h := vmHome(b)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	ctx := context.Background()
	d, err := qemu.New(ctx, qemu.Options{Home: h, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	golden, err := images.Latest(h, home.Golden)
	if err != nil {
		b.Fatal(err)
	}
	runtime, err := images.Latest(h, home.Runtime)
	if err != nil {
		b.Fatal(err)
	}
	token := make([]byte, 32)
	_, _ = rand.Read(token)
	spec := driver.Spec{ID: home.VMID{Namespace: "default", Name: "bench-boot"}, CPUs: 1, MemoryMiB: 2048,
		GoldenImage: golden.Version, RuntimeImage: runtime.Version, Token: hex.EncodeToString(token)}
	defer func() {
		_, _ = d.Kill(ctx, spec.ID)
		_ = d.Destroy(ctx, spec.ID)
	}()
	start := time.Now()
	if _, err := d.Start(ctx, spec); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		health, err := d.Health(hctx, spec.ID, spec.Token)
		cancel()
		if err == nil && health.Agentd == protocol.AgentdOK {
			return time.Since(start)
		}
	}
	b.Fatal("the test image did not answer its health within 3 minutes")
	return 0
}

// percentile is the p-th percentile of ds by nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
