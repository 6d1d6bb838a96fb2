package e2e

// A Dot doing work, end to end: the real binary and kubectl, real QEMU
// (tcg) booting the test image with the real dot-engine, and a stand-in
// OpenRouter on the host's loopback scripting the model's answers (text,
// tool calls and usage.cost). A chat message and its answer, a task whose
// model runs a command (computer.exec allowed) and completes with the spend
// OpenRouter reported, and a task whose command waits for a person's
// approval, given with kubectl patch, and runs exactly once.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram/telegramtest"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	// chatAnswer is the stand-in's answer to a chat message.
	chatAnswer = "hello from the stand-in model"
	// testsPassed is its final answer after the command ran: the task's
	// summary.
	testsPassed = "the tests passed"
	// runsFile gets one line each time the model's command for "run the
	// tests" runs; askedFile for "run the tests again", which is asked.
	runsFile  = protocol.DefaultDotHome + "/e2e-runs.txt"
	askedFile = protocol.DefaultDotHome + "/e2e-asked.txt"
	// chatFile for "run the tests in chat", asked in the chat; slowFile for
	// "run the slow tests", which takes 20 s (a server is killed meanwhile).
	chatFile = protocol.DefaultDotHome + "/e2e-chat.txt"
	// phoneFile for "run the phone tests", a task approved from Telegram.
	phoneFile = protocol.DefaultDotHome + "/e2e-phone.txt"
	slowFile  = protocol.DefaultDotHome + "/e2e-slow.txt"
	// standupDone is the answer to the automation's firing.
	standupDone = "standup notes written"
	// answerCost is the usage.cost of every answer, in USD.
	answerCost = 0.0021
)

// runTheTests is the call the stand-in model makes to run the tests,
// leaving a line in file.
func runTheTests(file string) string {
	return fmt.Sprintf(`{"command":"echo ran >> %s && echo %s"}`, file, testsPassed)
}

// scriptedModel is the stand-in model: it reads the conversation it is sent
// and answers the same way every time.
func scriptedModel(req modelRequest) modelAnswer {
	last := len(req.Messages) - 1
	first, text := req.text(0), req.text(last)
	const approved = "[Approval] The person approved your call of exec."
	switch {
	case strings.Contains(first, "You write a handoff summary"):
		return modelAnswer{Text: "SUMMARY: the tests were run", Cost: answerCost}
	case req.Messages[last].Role == "tool":
		return modelAnswer{Text: testsPassed, Cost: answerCost}
	case strings.HasPrefix(text, approved):
		// Made again as approved, with exactly these arguments.
		args := text[strings.Index(text, "{"):]
		var v json.RawMessage
		if err := json.NewDecoder(strings.NewReader(args)).Decode(&v); err == nil {
			args = string(v)
		}
		return modelAnswer{Calls: [][2]string{{"exec", args}}, Cost: answerCost}
	case strings.HasPrefix(text, "[Approval] The person rejected"):
		return modelAnswer{Text: "understood, I did not run it", Cost: answerCost}
	case strings.HasPrefix(text, "[Automation \"standup\" fired]"):
		return modelAnswer{Text: standupDone, Cost: answerCost}
	case strings.Contains(text, "remind me of the standup"):
		at := time.Now().Add(standupIn).UTC().Format(time.RFC3339)
		return modelAnswer{Text: "I will remind you", Calls: [][2]string{{"cron",
			fmt.Sprintf(`{"action":"add","name":"standup","message":"time for the standup","at":%q}`, at)}}, Cost: answerCost}
	case strings.Contains(text, "run the slow tests"):
		return modelAnswer{Text: "running the slow tests", Calls: [][2]string{{"exec",
			fmt.Sprintf(`{"command":"sleep 20 && echo ran >> %s && echo %s"}`, slowFile, testsPassed)}}, Cost: answerCost}
	case strings.Contains(text, "run the phone tests"):
		return modelAnswer{Text: "running the phone tests", Calls: [][2]string{{"exec", runTheTests(phoneFile)}}, Cost: answerCost}
	case strings.Contains(text, "run the tests in chat"):
		return modelAnswer{Text: "running them", Calls: [][2]string{{"exec", runTheTests(chatFile)}}, Cost: answerCost}
	case strings.Contains(text, "run the tests again"):
		return modelAnswer{Text: "running the tests again", Calls: [][2]string{{"exec", runTheTests(askedFile)}}, Cost: answerCost}
	case strings.Contains(text, "run the tests"):
		return modelAnswer{Text: "running the tests", Calls: [][2]string{{"exec", runTheTests(runsFile)}}, Cost: answerCost}
	}
	return modelAnswer{Text: chatAnswer, Cost: answerCost}
}

// standupIn is when the automation the model makes is due, from its making:
// long enough for the Dot to fall asleep and be woken for it.
const standupIn = 100 * time.Second

// testWakeLead is the hosts' wakeLead here: an automation wakes its
// computer this long before it is due.
const testWakeLead = 30 * time.Second

// workDot is a small Dot whose computer.exec is decided by exec.
func workDot(name, exec string) string {
	return smallDot(name, "") + fmt.Sprintf("  permissions:\n    computer.exec: %s\n", exec)
}

// idleDot is workDot whose computer sleeps after idle.
func idleDot(name, exec, idle string) string {
	return strings.Replace(workDot(name, exec), "    disk: 20Gi\n", "    disk: 20Gi\n    idleTimeout: "+idle+"\n", 1)
}

func TestDotWork(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	name := "e2e-work"
	w := newWork(t, name, scriptedModel)
	k := w.k

	t.Log("apply a Dot whose commands are allowed: it becomes READY")
	start := time.Now()
	k.apply(workDot(name, "allow"))
	k.waitDot(name, vmReadyTimeout, readyDot)
	t.Logf("FIGURE apply-to-READY %s (tcg)", time.Since(start).Round(time.Millisecond))

	t.Run("chat", func(t *testing.T) {
		w := w.on(t)
		start := time.Now()
		out := w.cli(3*time.Minute, "chat", name, "-m", "hello", "--timeout", "2m")
		if !strings.Contains(out, chatAnswer) {
			w.fail("chat -m printed %q; want the stand-in's answer %q", out, chatAnswer)
		}
		t.Logf("FIGURE chat -m answered in %s", time.Since(start).Round(time.Millisecond))
		page, err := w.dots().Messages(context.Background(), "default", name, wire.MessagesQuery{})
		if err != nil {
			t.Fatalf("GET the Dot's messages: %v", err)
		}
		var got []string
		for _, m := range page.Messages {
			got = append(got, m.Role+": "+m.Text)
		}
		if want := []string{"user: hello", "assistant: " + chatAnswer}; !slices.Equal(got, want) {
			w.fail("the Dot's messages are %q; want %q", got, want)
		}
	})

	t.Run("task runs a command", func(t *testing.T) {
		w := w.on(t)
		out := w.cli(4*time.Minute, "task", "add", name, "run the tests", "--wait")
		task := w.taskOf(out)
		if !strings.Contains(out, testsPassed) {
			w.fail("task add --wait printed %q; want its summary %q", out, testsPassed)
		}
		got := w.task(task)
		// Two answers: the call, then the summary.
		if got.Status.Phase != dotsv1.TaskCompleted || got.Status.Summary != testsPassed || !near(got.Status.SpentUSD, 2*answerCost) {
			w.fail("task %s: phase %s, summary %q, spentUSD %v; want COMPLETED, %q, %v", task, got.Status.Phase, got.Status.Summary, got.Status.SpentUSD, testsPassed, 2*answerCost)
		}
		if n := w.lines(runsFile); n != 1 {
			w.fail("%s holds %d lines; want the one line of the command's one run", runsFile, n)
		}
	})

	t.Run("the log and kubectl dots", func(t *testing.T) {
		w := w.on(t)
		out := w.cli(time.Minute, "logs", name, "--types", "tool.called,task.completed")
		for _, want := range []string{"ran exec echo ran >> " + runsFile, "completed: " + testsPassed} {
			if !strings.Contains(out, want) {
				w.fail("logs printed %q; want %q in it", out, want)
			}
		}
		// --since keeps to the events of that last while: all of this
		// run's within the hour, none within the last millisecond.
		if got := w.cli(time.Minute, "logs", name, "--types", "tool.called,task.completed", "--since", "1h"); got != out {
			w.fail("logs --since 1h printed %q; want what logs printed, %q", got, out)
		}
		if got := w.cli(time.Minute, "logs", name, "--since", "1ms"); strings.TrimSpace(got) != "" {
			w.fail("logs --since 1ms printed %q; want nothing", got)
		}
		if got := w.cli(time.Minute, "files", "get", name, runsFile); got != "ran\n" {
			w.fail("files get %s printed %q; want the line the Dot's command wrote", runsFile, got)
		}
		if got := w.cli(time.Minute, "files", "ls", name); !strings.Contains(got, "e2e-runs.txt") {
			w.fail("files ls printed %q; want the file the Dot wrote in it", got)
		}
		status := w.cli(time.Minute, "status")
		if !regexp.MustCompile(name+`\s+READY\s+RUNNING\s+-\s+0\s+\$0\.0\d+`).MatchString(status) || !strings.Contains(status, "hosts: vm ready") {
			w.fail("status printed %q; want the Dot READY, its computer RUNNING, what it spent today, and the host ready", status)
		}
		// The binary is the kubectl plugin kubectl-dots: kubectl finds it on
		// PATH and hands it its own flags.
		dir := t.TempDir()
		if err := os.Symlink(binary, filepath.Join(dir, "kubectl-dots")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "kubectl", "dots", "chat", name, "-m", "hello", "--kubeconfig", w.k.s.kubeconfig(), "-n", "default")
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		got, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(got), chatAnswer) {
			w.fail("kubectl dots chat -m: %v\n%s", err, got)
		}
		// kubectl hands the plugin its --context: a kubeconfig whose current
		// context names a server that is not there still reaches the Dot
		// through the context named.
		kc, err := clientcmd.LoadFromFile(w.k.s.kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		real := kc.CurrentContext
		nowhere := kc.Clusters[kc.Contexts[real].Cluster].DeepCopy()
		nowhere.Server = "https://127.0.0.1:1"
		kc.Clusters["nowhere"] = nowhere
		kc.Contexts["nowhere"] = kc.Contexts[real].DeepCopy()
		kc.Contexts["nowhere"].Cluster = "nowhere"
		kc.CurrentContext = "nowhere"
		two := filepath.Join(dir, "two-contexts.kubeconfig")
		if err := clientcmd.WriteToFile(*kc, two); err != nil {
			t.Fatal(err)
		}
		cmd = exec.CommandContext(ctx, "kubectl", "dots", "logs", name, "--types", "task.completed", "--kubeconfig", two, "--context", real, "-n", "default")
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		if got, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(got), "completed: "+testsPassed) {
			w.fail("kubectl dots logs --context %s: %v\n%s", real, err, got)
		}
	})

	t.Run("logs -f shows a task's steps as they happen", func(t *testing.T) {
		w := w.on(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		follow := exec.CommandContext(ctx, binary, "logs", name, "-f", "--types", "task.started,tool.called,task.completed")
		follow.Env = append(os.Environ(), w.env...)
		var lines agentdtest.LockedBuffer
		follow.Stdout, follow.Stderr = &lines, &lines
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = follow.Wait() }()
		// Nothing of the earlier task is printed again once it follows:
		// what it printed so far is that task's story; the new task's
		// comes live.
		time.Sleep(2 * time.Second)
		before := strings.Count(lines.String(), "completed: "+testsPassed)
		task := w.taskOf(w.cli(time.Minute, "task", "add", name, "run the tests"))
		uid := strings.SplitN(string(w.task(task).UID), "-", 2)[0]
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			out := lines.String()
			if strings.Count(out, "completed: "+testsPassed) > before && strings.Contains(out, "task "+uid+" started") {
				break
			}
			if time.Now().After(deadline) {
				w.fail("logs -f printed %q; want the new task %s's start and end as they happened", out, uid)
			}
		}
	})

	t.Run("an approval lets a command run once", func(t *testing.T) {
		w := w.on(t)
		k.apply(workDot(name, "ask"))
		d := k.waitDot(name, 2*time.Minute, func(d *dotsv1.Dot) bool {
			return readyDot(d) && d.Spec.Permissions["computer.exec"] == "ask"
		})
		t.Logf("computer.exec is ask from generation %d", d.Generation)
		out := w.cli(time.Minute, "task", "add", name, "run the tests again")
		task := w.taskOf(out)
		approval := w.waitApproval(task, 3*time.Minute)
		if approval.Spec.Tool != "exec" || approval.Spec.Permission != "computer.exec" {
			w.fail("Approval %s asks for %s (%s); want exec (computer.exec)", approval.Name, approval.Spec.Tool, approval.Spec.Permission)
		}
		if p := w.task(task).Status.Phase; p != dotsv1.TaskWaitingApproval {
			w.fail("task %s is %s while its Approval waits; want WAITING_APPROVAL", task, p)
		}
		if n := w.lines(askedFile); n != 0 {
			w.fail("the command ran before the approval: %s holds %d lines", askedFile, n)
		}
		k.run("patch", "approval", approval.Name, "--type", "merge", "-p", `{"spec":{"decision":"approve"}}`)
		got := w.waitTask(task, 3*time.Minute)
		if got.Status.Phase != dotsv1.TaskCompleted || got.Status.Summary != testsPassed {
			w.fail("task %s ended %s with %q %q; want COMPLETED with %q", task, got.Status.Phase, got.Status.Summary, got.Status.Error, testsPassed)
		}
		if n := w.lines(askedFile); n != 1 {
			w.fail("%s holds %d lines after the approval; want the one line of the command run exactly once", askedFile, n)
		}
	})

	t.Run("a phone on Telegram talks to the Dot and approves a task's call by button", func(t *testing.T) {
		w := w.on(t)
		tg := w.telegram
		// This server runs no WhatsApp (opt-in): linking it says how to turn it on.
		if _, err := w.dots().AddChannel(context.Background(), "default", name, wire.ChannelAdd{Type: "whatsapp"}); client.CodeOf(err) != wire.CodeChannelOff ||
			!strings.Contains(err.Error(), "INVISIBLE_DOTS_WHATSAPP=1") {
			w.fail("adding WhatsApp to a server without it: %v; want channel_off saying how to turn it on", err)
		}
		out := w.cliIn(time.Minute, e2eBotToken+"\n", "channel", "add", "telegram", "--dot", name)
		if !strings.Contains(out, "to the Telegram bot @"+tg.Username) || !strings.Contains(out, "not end-to-end encrypted") {
			w.fail("channel add printed %q; want the bot linked and the warning", out)
		}
		channel := name + "-telegram"
		k.run("wait", "--for=jsonpath={.status.state}=connected", "channel/"+channel, "--timeout=60s")
		out = w.cli(time.Minute, "channel", "pair", "--dot", name)
		m := regexp.MustCompile(`/start ([0-9A-Z]{8})`).FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, "https://t.me/"+tg.Username+"?start="+m[1]) {
			w.fail("channel pair printed %q; want the words and the deep link", out)
		}
		const ada = 4242
		chat := strconv.Itoa(ada)
		waitSent := func(what string, ok func(telegramtest.Call) bool) telegramtest.Call {
			t.Helper()
			for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				for _, c := range tg.Calls("") {
					if (c.Method == "sendMessage" || c.Method == "editMessageText") && c.Fields["chat_id"] == chat && ok(c) {
						return c
					}
				}
			}
			w.fail("Telegram was not sent %s", what)
			return telegramtest.Call{}
		}
		tg.Say(ada, "Ada", m[0])
		waitSent("the welcome", func(c telegramtest.Call) bool { return strings.HasPrefix(c.Field("text"), "Paired.") })

		t.Log("a message from the phone is answered in the chat")
		sent := time.Now()
		tg.Say(ada, "Ada", "hello from the phone")
		answer := waitSent("the Dot's answer", func(c telegramtest.Call) bool { return c.Field("text") == chatAnswer })
		t.Logf("FIGURE telegram message to answer %s (one message, tcg; make bench has p50/p99)", answer.At.Sub(sent).Round(time.Millisecond))
		msgs := w.cli(time.Minute, "logs", name, "--types", "message.user")
		if !strings.Contains(msgs, "you, via Telegram: hello from the phone") {
			w.fail("the log says %q; want the message via Telegram", msgs)
		}

		t.Log("a task's call asks: the prompt's Approve button runs it once")
		task := w.taskOf(w.cli(time.Minute, "task", "add", name, "run the phone tests"))
		// This call's prompt, not one of an approval an earlier subtest
		// answered by kubectl: the channel, connected while that one still
		// waited, asks every pending approval.
		prompt := waitSent("the approval prompt", func(c telegramtest.Call) bool {
			return strings.Contains(c.Fields["reply_markup"], "ap1:y:") && strings.Contains(c.Field("text"), phoneFile)
		})
		if txt := prompt.Field("text"); !strings.Contains(txt, "Run commands (high risk)") {
			w.fail("the prompt says %q; want the permission's risk and the command", txt)
		}
		data := regexp.MustCompile(`ap1:y:[^"\\]+`).FindString(prompt.Fields["reply_markup"])
		tg.Press(ada, 1, data)
		// What the phone is told of its press: "Approved." (a press that
		// came before its Approval was made was once told the request did
		// not exist, and lost).
		var told []string
		for deadline := time.Now().Add(time.Minute); len(told) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, c := range tg.Calls("answerCallbackQuery") {
				told = append(told, c.Field("text"))
			}
		}
		if len(told) != 1 || told[0] != "Approved." {
			w.fail("the press was answered %q; want one \"Approved.\"", told)
		}
		got := w.waitTask(task, 3*time.Minute)
		if got.Status.Phase != dotsv1.TaskCompleted {
			w.fail("task %s ended %s (%s); want COMPLETED after the press", task, got.Status.Phase, got.Status.Error)
		}
		if n := w.lines(phoneFile); n != 1 {
			w.fail("%s holds %d lines; want the one of the call run exactly once", phoneFile, n)
		}
		waitSent("the prompt edited to the outcome", func(c telegramtest.Call) bool {
			return c.Method == "editMessageText" && strings.HasSuffix(c.Field("text"), "Approved.")
		})
		waitSent("the task's end", func(c telegramtest.Call) bool { return c.Field("text") == "Task done: "+testsPassed })
		for _, c := range tg.Calls("answerCallbackQuery") {
			if c.Field("text") != "Approved." {
				w.fail("the press was answered %q; want Approved.", c.Field("text"))
			}
		}

		t.Log("the channel lists Ada, and goes when removed")
		if out := w.cli(time.Minute, "channel", "ls"); !strings.Contains(out, "connected") || !strings.Contains(out, "Ada ("+chat+")") {
			w.fail("channel ls printed %q; want it connected with Ada", out)
		}
		w.cli(time.Minute, "channel", "rm", "--dot", name)
		k.run("wait", "--for=delete", "channel/"+channel, "--timeout=60s")
	})

	t.Run("chat asks inline and always allows", func(t *testing.T) {
		w := w.on(t)
		// computer.exec is ask: the chat asks, the person answers always.
		out := w.cliIn(3*time.Minute, "run the tests in chat\nalways\n\n", "chat", name)
		for _, want := range []string{"asks to run exec", "approve? [y/N/always]", "  · ran exec echo ran >> " + chatFile, testsPassed} {
			if !strings.Contains(out, want) {
				w.fail("chat printed %q; want %q in it", out, want)
			}
		}
		d := k.waitDot(name, time.Minute, func(d *dotsv1.Dot) bool { return d.Spec.Permissions["computer.exec"] == "allow" })
		t.Logf("always allow wrote computer.exec: allow (generation %d)", d.Generation)
		// Asked again, the call is not asked.
		out = w.cli(3*time.Minute, "chat", name, "-m", "run the tests in chat", "--timeout", "2m")
		if strings.Contains(out, "asks to run") || !strings.Contains(out, testsPassed) {
			w.fail("after always, chat -m printed %q; want the answer with no question", out)
		}
		if n := w.lines(chatFile); n != 2 {
			w.fail("%s holds %d lines; want one for each of the two chats", chatFile, n)
		}
	})

	parent := t
	t.Run("a server killed while a task runs", func(t *testing.T) {
		sw := w.on(t)
		run := sw.startSlowTask(name)
		sw.k.s.kill9()
		t.Log("the server was killed with SIGKILL while the task ran; starting it again")
		// On the same address, so the stream's clients find it again; it
		// serves the subtests after this one too.
		srv := launchServer(parent, sw.k.s.home, "INVISIBLE_DOTS_LISTEN="+sw.k.s.addr)
		srv.waitReadyIn(t)
		srv.addr = sw.k.s.addr
		w.k.s, k.s, sw.k.s = srv, srv, srv
		sw.checkSlowTaskRanOnce(run)
	})

	t.Run("PostgreSQL killed while a task runs", func(t *testing.T) {
		sw := w.on(t)
		run := sw.startSlowTask(name)
		b, err := os.ReadFile(filepath.Join(sw.home.DB(), "postmaster.pid"))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		pid, err := strconv.Atoi(strings.TrimSpace(first))
		if err != nil {
			t.Fatalf("postmaster.pid: %q", b)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		t.Log("the server's PostgreSQL was killed with SIGKILL while the task ran; the server starts it again")
		// A backend may answer a moment after its postmaster died: what
		// counts is an answer after the server says its PostgreSQL is back.
		for !strings.Contains(readFile(sw.k.s.logPath), "PostgreSQL is back") {
			if time.Since(killed) > 2*time.Minute || sw.k.s.exited(0) {
				sw.fail("the server did not start its PostgreSQL again within 2 minutes of the kill; what its log says of PostgreSQL since:\n%s\nits last lines:\n%s",
					sw.k.s.logLinesSince(killed, "postgres", 60), sw.k.s.logTail(15))
			}
			time.Sleep(50 * time.Millisecond)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := run.dots.Events(ctx, "default", name, wire.EventsQuery{Order: wire.OrderDesc, Limit: 1})
			cancel()
			if err == nil {
				break
			}
			if time.Since(killed) > 2*time.Minute {
				sw.fail("the Dot's events were not served within 2 minutes of PostgreSQL's kill: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("FIGURE PostgreSQL killed to the first event served again: %v", time.Since(killed).Round(time.Millisecond))
		if sw.k.s.exited(0) {
			sw.fail("the server exited when its PostgreSQL was killed")
		}
		sw.checkSlowTaskRanOnce(run)
	})

	t.Run("a new runtime ISO reaches the Dot at its reboot", func(t *testing.T) {
		w := w.on(t)
		current := func(c *dotsv1.Computer) *metav1.Condition {
			return meta.FindStatusCondition(c.Status.Conditions, dotsv1.RuntimeCurrentCondition)
		}
		c := k.waitComputer(name, time.Minute, func(c *dotsv1.Computer) bool {
			cond := current(c)
			return c.Status.State == dotsv1.ComputerRunning && cond != nil && cond.Status == metav1.ConditionTrue
		})
		old := c.Status.RuntimeImage
		if c.Status.System == nil || c.Status.System.RuntimeVersion != old {
			w.fail("the guest reports runtime %+v; want %s, the one its VM was started with", c.Status.System, old)
		}
		newer := registerRuntimeAgain(t, w.home, old)
		t.Logf("runtime ISO %s registered beside %s", newer, old)
		k.waitComputer(name, time.Minute, func(c *dotsv1.Computer) bool {
			cond := current(c)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == dotsv1.RuntimeRestartPendingReason && strings.Contains(cond.Message, newer)
		})
		if out := k.run("get", "computer", name, "-o", "wide"); !strings.Contains(out, "RUNTIME-CURRENT") || !strings.Contains(out, "False") || !strings.Contains(out, old) {
			w.fail("kubectl get computer -o wide printed:\n%s\nwant the RUNTIME and RUNTIME-CURRENT columns, %s and False", out, old)
		}
		w.cli(time.Minute, "computer", "reboot", name)
		k.waitComputer(name, 3*time.Minute, func(c *dotsv1.Computer) bool {
			cond := current(c)
			return c.Status.State == dotsv1.ComputerRunning && c.Status.RuntimeImage == newer &&
				c.Status.System != nil && c.Status.System.RuntimeVersion == newer && cond != nil && cond.Status == metav1.ConditionTrue
		})
		k.waitDot(name, vmReadyTimeout, readyDot)
	})

	t.Run("an idle Dot sleeps and a message wakes it", func(t *testing.T) {
		w := w.on(t)
		k.apply(idleDot(name, "allow", "10s"))
		k.waitComputer(name, 3*time.Minute, func(c *dotsv1.Computer) bool {
			return c.Status.State == dotsv1.ComputerStopped && c.Status.StopReason == dotsv1.StopIdle
		})
		start := time.Now()
		out := w.cli(4*time.Minute, "chat", name, "-m", "hello again", "--timeout", "3m")
		if !strings.Contains(out, chatAnswer) {
			w.fail("chat -m to a sleeping Dot printed %q; want the stand-in's answer", out)
		}
		t.Logf("FIGURE a sleeping Dot answered in %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("an automation wakes its sleeping Dot before it is due", func(t *testing.T) {
		w := w.on(t)
		k.apply(strings.Replace(idleDot(name, "allow", "10s"), "  permissions:\n", "  permissions:\n    automations: allow\n", 1))
		k.waitDot(name, time.Minute, func(d *dotsv1.Dot) bool { return readyDot(d) && d.Spec.Permissions["automations"] == "allow" })
		w.cli(3*time.Minute, "chat", name, "-m", "remind me of the standup", "--timeout", "2m")
		c := k.waitComputer(name, time.Minute, func(c *dotsv1.Computer) bool { return c.Status.NextAutomationTime != nil })
		due := c.Status.NextAutomationTime.Time
		t.Logf("nextAutomationTime %s, in %s", due.Format(time.RFC3339), time.Until(due).Round(time.Second))
		k.waitComputer(name, time.Until(due), func(c *dotsv1.Computer) bool {
			return c.Status.State == dotsv1.ComputerStopped && c.Status.StopReason == dotsv1.StopIdle
		})
		t.Logf("asleep %s before the automation is due", time.Until(due).Round(time.Second))
		k.waitComputer(name, time.Until(due)+time.Minute, func(c *dotsv1.Computer) bool { return c.Status.State == dotsv1.ComputerRunning })
		woke := time.Now()
		if woke.After(due) {
			w.fail("the computer was running again at %s, after the automation was due at %s", woke.Format(time.RFC3339), due.Format(time.RFC3339))
		}
		t.Logf("FIGURE running again %s before the automation was due (wake lead %s)", due.Sub(woke).Round(time.Second), testWakeLead)
		for deadline := due.Add(3 * time.Minute); ; time.Sleep(time.Second) {
			page, err := w.dots().Messages(context.Background(), "default", name, wire.MessagesQuery{Order: wire.OrderDesc, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(page.Messages, func(m wire.Message) bool { return m.Text == standupDone }) {
				break
			}
			if time.Now().After(deadline) {
				w.fail("the automation's firing was not answered by %s", deadline.Format(time.RFC3339))
			}
		}
	})
}

// newWork is a home with the test image whose guests use a stand-in
// OpenRouter answering with model, a server on it with an OpenRouter key
// stored, and the driver of the work of the Dot dot (not applied yet).
func newWork(t testing.TB, dot string, model func(modelRequest) modelAnswer) work {
	t.Helper()
	return newWorkIn(t, vmHome(t), dot, model)
}

// newWorkIn is newWork on the home h (the golden image's, for one).
// Each of configs changes the host's configuration before the server starts.
func newWorkIn(t testing.TB, h home.Layout, dot string, model func(modelRequest) modelAnswer, configs ...func(*hostconfig.Config)) work {
	t.Helper()
	stand := startStandIn(t, model)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG, WakeLead: testWakeLead.String(),
		OpenRouterURL: fmt.Sprintf("http://10.0.2.2:%d/api/v1", stand.port)}
	for _, c := range configs {
		c(&cfg)
	}
	if err := hostconfig.Save(h, cfg); err != nil {
		t.Fatal(err)
	}
	vm := h.VM(home.VMID{Namespace: "default", Name: dot})
	t.Cleanup(func() { cvmKillRecorded(vm) })
	// Telegram is a fake Bot API (named fake: nothing reaches Telegram).
	tg := telegramtest.New(e2eBotToken)
	t.Cleanup(tg.Close)
	srv := startServer(t, h.Root, "INVISIBLE_DOTS_TELEGRAM_API="+tg.URL())
	w := work{t: t, k: cvmKubectl{t: t, s: srv}, dot: dot, home: h, telegram: tg,
		env: []string{"INVISIBLE_DOTS_HOME=" + h.Root, "KUBECONFIG=" + srv.kubeconfig()}}
	if out, err := secretOpenRouter(w.env, "sk-or-v1-e2e-work-0123456789\n"); err != nil {
		t.Fatalf("secret openrouter: %v\n%s", err, out)
	}
	return w
}

// work drives one Dot's work with the command line and kubectl, and tells
// the Dot's story when something fails.
type work struct {
	t    testing.TB
	k    cvmKubectl
	dot  string
	home home.Layout
	env  []string
	// telegram is the server's Telegram: a fake Bot API.
	telegram *telegramtest.FakeBotAPI
}

// e2eBotToken is the fake Bot API's bot.
const e2eBotToken = "424242:AAH-e2e-bot-secret"

// on is w for a subtest.
func (w work) on(t *testing.T) work {
	w.t = t
	w.k.t = t
	return w
}

// fail fails with the Dot's conditions, its Events and the server's log.
func (w work) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf(format+"\n%s", append(args, w.story())...)
}

func (w work) story() string {
	var b strings.Builder
	if out, err := w.k.try("get", "dot", w.dot, "-o", "json"); err == nil {
		d := &dotsv1.Dot{}
		if json.Unmarshal([]byte(out), d) == nil {
			fmt.Fprintf(&b, "Dot %s: phase %s, agentState %s, currentTask %q, pendingApprovals %d\n", w.dot, d.Status.Phase, d.Status.AgentState, d.Status.CurrentTask, d.Status.PendingApprovals)
			for _, c := range d.Status.Conditions {
				fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	tasks, _ := w.k.try("get", "tasks,approvals", "-o", "wide")
	events, _ := w.k.try("get", "events", "--sort-by", ".lastTimestamp")
	fmt.Fprintf(&b, "tasks and approvals:\n%s\nevents:\n%s\nserver log:\n%s", tasks, events, w.k.s.logTail(60))
	return b.String()
}

// cli runs `invisible-dots ARGS` as the person would, bounded by timeout.
func (w work) cli(timeout time.Duration, args ...string) string {
	w.t.Helper()
	return w.cliIn(timeout, "", args...)
}

// cliIn is cli with stdin given.
func (w work) cliIn(timeout time.Duration, stdin string, args ...string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), w.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		w.fail("invisible-dots %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func (w work) dots() *client.Client {
	w.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", w.k.s.kubeconfig())
	if err != nil {
		w.t.Fatal(err)
	}
	c, err := client.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

var queuedRE = regexp.MustCompile(`task (\S+) queued`)

// taskOf is the task `task add` made, from what it printed.
func (w work) taskOf(out string) string {
	w.t.Helper()
	m := queuedRE.FindStringSubmatch(out)
	if m == nil {
		w.fail("task add printed %q; want it to name the task it queued", out)
	}
	return m[1]
}

func (w work) task(name string) *dotsv1.Task {
	w.t.Helper()
	t := &dotsv1.Task{}
	out := w.k.run("get", "task", name, "-o", "json")
	if err := json.Unmarshal([]byte(out), t); err != nil {
		w.t.Fatalf("read task %s: %v", name, err)
	}
	return t
}

// waitTask waits for the task's end.
func (w work) waitTask(name string, timeout time.Duration) *dotsv1.Task {
	w.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		t := w.task(name)
		switch t.Status.Phase {
		case dotsv1.TaskCompleted, dotsv1.TaskFailed, dotsv1.TaskCancelled:
			return t
		}
		if time.Now().After(deadline) {
			w.fail("task %s did not end within %s; it is %s", name, timeout, t.Status.Phase)
		}
	}
}

// waitApproval waits for the Approval the task's run asked for.
func (w work) waitApproval(task string, timeout time.Duration) *dotsv1.Approval {
	w.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		var list dotsv1.ApprovalList
		out := w.k.run("get", "approvals", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			w.t.Fatalf("kubectl get approvals: %v", err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.TaskName == task {
				return &list.Items[i]
			}
		}
		if time.Now().After(deadline) {
			w.fail("no Approval for task %s within %s", task, timeout)
		}
	}
}

// lines counts the lines the command left in file in the guest, read
// through dot-agentd's exec route.
func (w work) lines(file string) int {
	w.t.Helper()
	target, gc := guestOf(w.t, w.k, w.dot)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ex protocol.ExecResponse
	if err := gc.DoJSON(ctx, target, http.MethodPost, protocol.PathExec, protocol.ExecRequest{Command: "cat " + file + " 2>/dev/null || true"}, &ex); err != nil {
		w.t.Fatalf("read %s in the guest: %v", file, err)
	}
	return strings.Count(ex.Stdout, "ran\n")
}

// readFile is the file's text, empty when it cannot be read.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// slowRun is a slow task under way, with ten clients following its Dot's
// stream from the log's end when it began running.
type slowRun struct {
	task, uid string
	// lines is what slowFile held before the task ran.
	lines     int
	from      int64
	dots      *client.Client
	followers []*follower
}

// startSlowTask gives dot the task whose command takes 20 s, waits until
// it runs, and starts ten stream clients after the log's last event.
func (w work) startSlowTask(dot string) slowRun {
	before := w.lines(slowFile)
	out := w.cli(time.Minute, "task", "add", dot, "run the slow tests")
	task := w.taskOf(out)
	run := slowRun{task: task, uid: string(w.task(task).UID), lines: before, dots: w.dots()}
	// Running: its task.created was delivered; its command takes 20 s.
	for deadline := time.Now().Add(3 * time.Minute); w.task(task).Status.Phase != dotsv1.TaskRunning; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.fail("task %s did not start running", task)
		}
	}
	last, err := run.dots.Events(context.Background(), "default", dot, wire.EventsQuery{Order: wire.OrderDesc, Limit: 1})
	if err != nil || len(last.Events) != 1 {
		w.t.Fatalf("read the log's last event: %v", err)
	}
	run.from = last.Events[0].ID
	run.followers = followStream(w.t, run.dots, dot, run.from, 10)
	return run
}

// checkSlowTaskRanOnce waits for the slow task across whatever the caller
// did to the server meanwhile: it completed, its command ran exactly once,
// its story holds each of its events once, and every stream client resumed
// with Last-Event-ID and holds the log after its start, in order, none
// twice.
func (w work) checkSlowTaskRanOnce(run slowRun) {
	got := w.waitTask(run.task, 4*time.Minute)
	if got.Status.Phase != dotsv1.TaskCompleted || got.Status.Summary != testsPassed {
		w.fail("task %s ended %s %q %q; want COMPLETED with %q", run.task, got.Status.Phase, got.Status.Summary, got.Status.Error, testsPassed)
	}
	if n := w.lines(slowFile); n != run.lines+1 {
		w.fail("%s holds %d lines; want the %d before it and the one line of the command run once", slowFile, n, run.lines)
	}
	dots := w.dots()
	story, err := dots.Events(context.Background(), "default", w.dot, wire.EventsQuery{Task: run.uid, Limit: wire.MaxEventsPage})
	if err != nil {
		w.t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range story.Events {
		count[e.Source+" "+e.Type]++
	}
	for _, typ := range []string{"host " + wire.EventTaskCreated, "guest " + protocol.EventTaskStarted, "guest " + protocol.EventToolCalled, "guest " + protocol.EventTaskCompleted} {
		if count[typ] != 1 {
			w.fail("the task's story holds %d %s events; want exactly one (%v)", count[typ], typ, count)
		}
	}
	after, err := dots.Events(context.Background(), "default", w.dot, wire.EventsQuery{After: run.from, Limit: wire.MaxEventsPage})
	if err != nil {
		w.t.Fatal(err)
	}
	var want []int64
	for _, e := range after.Events {
		want = append(want, e.ID)
	}
	for i, f := range run.followers {
		// More may come after the log was read (the agent going idle):
		// the first ones are the log's, and all are in order, once.
		got := f.wait(len(want), time.Minute)
		if len(got) < len(want) || !slices.Equal(got[:len(want)], want) || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			w.fail("stream client %d got the events %v; want the log's %v, in order, none twice", i, got, want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// follower is a client of a Dot's live stream, keeping the ids it got.
type follower struct {
	mu  sync.Mutex
	ids []int64
}

// followStream starts n clients of the Dot's stream after the event id from;
// they stop with the test.
func followStream(t testing.TB, dots *client.Client, dot string, from int64, n int) []*follower {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var out []*follower
	for range n {
		f := &follower{}
		after := from
		events, _ := dots.Stream(ctx, client.StreamOptions{Namespace: "default", Dot: dot, After: &after, Retry: 200 * time.Millisecond})
		go func() {
			for e := range events {
				f.mu.Lock()
				f.ids = append(f.ids, e.ID)
				f.mu.Unlock()
			}
		}()
		out = append(out, f)
	}
	return out
}

// wait waits until the client holds n events or the timeout passes, and
// returns what it holds.
func (f *follower) wait(n int, timeout time.Duration) []int64 {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		f.mu.Lock()
		ids := slices.Clone(f.ids)
		f.mu.Unlock()
		if len(ids) >= n || time.Now().After(deadline) {
			return ids
		}
	}
}

// exec runs a command in the Dot's guest as dot, through dot-agentd's exec
// route.
func (w work) exec(command string) protocol.ExecResponse {
	w.t.Helper()
	target, gc := guestOf(w.t, w.k, w.dot)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ex protocol.ExecResponse
	if err := gc.DoJSON(ctx, target, http.MethodPost, protocol.PathExec, protocol.ExecRequest{Command: command, TimeoutMs: 30000}, &ex); err != nil {
		w.fail("exec %q in the guest: %v", command, err)
	}
	return ex
}

// put writes a file in the Dot's guest as dot, through dot-agentd's files
// route.
func (w work) put(path string, data []byte) {
	w.t.Helper()
	target, gc := guestOf(w.t, w.k, w.dot)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := gc.Request(ctx, target, http.MethodPut, protocol.PathFiles+"?"+protocol.QueryPath+"="+url.QueryEscape(path), bytes.NewReader(data), nil)
	if err != nil {
		w.fail("put %s in the guest: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		w.fail("put %s in the guest: %s %s", path, resp.Status, body)
	}
}

// guestUsedMiB is the memory the Dot's guest uses (total less available),
// from dot-agentd's system route. It does not fail the test, so it may run
// on another goroutine (the stand-in model's).
func (w work) guestUsedMiB() (uint64, error) {
	target, gc := guestOf(w.t, w.k, w.dot)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys, err := gc.System(ctx, target)
	if err != nil {
		return 0, fmt.Errorf("the guest's system route: %w", err)
	}
	return (sys.MemTotalBytes - sys.MemAvailableBytes) >> 20, nil
}

// registerRuntimeAgain registers, in the home h, the runtime ISO of version
// old built again now: the same files under a newer version, as an `image
// build` after a change to our code registers one. It returns the version.
func registerRuntimeAgain(t testing.TB, h home.Layout, old string) string {
	t.Helper()
	img, err := images.Get(h, home.Runtime, old)
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := isofs.Read(img.File)
	if err != nil {
		t.Fatal(err)
	}
	delete(files, protocol.RuntimeManifestFile)
	// A version is the build's second: one built in the same second as
	// the old one would have its version.
	time.Sleep(time.Second)
	mp, m, err := runtimeiso.Build(t.TempDir(), files, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.Register(h, mp); err != nil {
		t.Fatal(err)
	}
	return m.Version
}
