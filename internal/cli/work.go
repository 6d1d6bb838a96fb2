package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/approvalonce"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// The commands that give a Dot work and answer it: task, approve, reject,
// chat. Each is a thin client of the resource API and the Dots API with the
// kubeconfig's credentials: $KUBECONFIG when set, else the home's.

// conn is how a person's command reaches the API server: kubectl's own
// flags (--kubeconfig, --context, -n/--namespace), so the binary also works
// as the kubectl plugin kubectl-dots, which kubectl hands these flags to.
// Without --kubeconfig: $KUBECONFIG when set, else the home's.
type conn struct {
	kubeconfig string
	context    string
	namespace  string
}

// addConnFlags registers the connection flags on fs.
func addConnFlags(fs *pflag.FlagSet, c *conn) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "the kubeconfig (default: $KUBECONFIG, else the home's)")
	fs.StringVar(&c.context, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&c.namespace, "namespace", "n", "", "the namespace (default: the context's, else default)")
}

// restConfig is the configuration and the namespace c names.
func (c conn) restConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	switch {
	case c.kubeconfig != "":
		rules.ExplicitPath = c.kubeconfig
	case os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "":
		layout, err := home.FromEnv()
		if err != nil {
			return nil, "", err
		}
		if _, err := os.Stat(layout.Kubeconfig()); err != nil {
			return nil, "", fmt.Errorf("no kubeconfig at %s and KUBECONFIG is not set: start the server with 'invisible-dots server', or pass --kubeconfig (%w)", layout.Kubeconfig(), err)
		}
		rules.ExplicitPath = layout.Kubeconfig()
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("read the kubeconfig: %w", err)
	}
	ns := c.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	return cfg, ns, nil
}

// clients are the two APIs' clients and the namespace to use.
type clients struct {
	kube client.Client
	dots *dotsclient.Client
	ns   string
}

func (c conn) clients() (*clients, error) {
	cfg, ns, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	dots, err := dotsclient.New(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, dots: dots, ns: ns}, nil
}

func newTaskCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Give a Dot tasks, list them, cancel one (Task resources, as kubectl can)",
	}
	addConnFlags(cmd.PersistentFlags(), &cn)

	var (
		priority int32
		at       string
		wait     bool
	)
	add := &cobra.Command{
		Use:   "add DOT TEXT",
		Short: "Give the Dot a task; --wait waits for its end and prints its summary",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			t := &dotsv1.Task{
				ObjectMeta: metav1.ObjectMeta{Name: args[0] + "-" + rand.String(5), Namespace: c.ns},
				Spec:       dotsv1.TaskSpec{DotName: args[0], Description: args[1], Priority: priority},
			}
			if at != "" {
				when, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--at %q is not a time like 2026-12-01T09:00:00Z: %w", at, err)
				}
				t.Spec.ScheduledAt = &metav1.Time{Time: when}
			}
			if err := c.kube.Create(cmd.Context(), t); err != nil {
				return fmt.Errorf("create the task: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s queued for Dot %s\n", t.Name, args[0])
			if !wait {
				return nil
			}
			return waitTask(cmd.Context(), c, t.Name, cmd.OutOrStdout())
		},
	}
	add.Flags().Int32Var(&priority, "priority", 0, "higher runs first")
	add.Flags().StringVar(&at, "at", "", "not before this time (RFC 3339)")
	add.Flags().BoolVar(&wait, "wait", false, "wait until the task ends and print its summary or error")

	list := &cobra.Command{
		Use:   "list [DOT]",
		Short: "List the tasks of the namespace, or of one Dot",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			// One Dot's tasks by its label (set on every Task at admission,
			// and by the Task controller on a cluster without that plugin):
			// the server filters, not this command.
			opts := []client.ListOption{client.InNamespace(c.ns)}
			if len(args) == 1 {
				opts = append(opts, client.MatchingLabels{dotsv1.DotLabel: args[0]})
			}
			var tasks dotsv1.TaskList
			if err := c.kube.List(cmd.Context(), &tasks, opts...); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDOT\tPHASE\tPRIORITY\tSPENT USD\tSUMMARY")
			for _, t := range tasks.Items {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.4f\t%s\n", t.Name, t.Spec.DotName, t.Status.Phase, t.Spec.Priority, t.Status.SpentUSD, eventtext.Cut(cmp.Or(t.Status.Summary, t.Status.Error), 60))
			}
			return w.Flush()
		},
	}

	cancel := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a task (spec.cancelRequested: true)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			t := &dotsv1.Task{}
			if err := c.kube.Get(cmd.Context(), client.ObjectKey{Namespace: c.ns, Name: args[0]}, t); err != nil {
				return fmt.Errorf("task %s: %w", args[0], err)
			}
			base := t.DeepCopy()
			t.Spec.CancelRequested = true
			if err := c.kube.Patch(cmd.Context(), t, client.MergeFrom(base)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: cancel asked\n", t.Name)
			return nil
		},
	}
	cmd.AddCommand(add, list, cancel)
	return cmd
}

// waitTask waits for a task's end and prints its summary or error.
func waitTask(ctx context.Context, c *clients, name string, out io.Writer) error {
	last := dotsv1.TaskPhase("")
	var after int64
	for {
		t := &dotsv1.Task{}
		if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, t); err != nil {
			return err
		}
		if t.Status.Phase != last {
			fmt.Fprintf(out, "%s %s\n", name, t.Status.Phase)
			last = t.Status.Phase
		}
		// The task's steps as they are logged: its progress, the tools it
		// runs, what it asks.
		if page, err := c.dots.Events(ctx, c.ns, t.Spec.DotName, wire.EventsQuery{
			After: after, Task: string(t.UID), Limit: wire.MaxEventsPage,
			Types: []string{protocol.EventTaskProgress, protocol.EventToolCalled, protocol.EventApprovalRequested},
		}); err == nil {
			for _, e := range page.Events {
				after = e.ID
				fmt.Fprintln(out, "  · "+eventtext.Line(e))
			}
		}
		switch t.Status.Phase {
		case dotsv1.TaskCompleted:
			fmt.Fprintln(out, t.Status.Summary)
			return nil
		case dotsv1.TaskFailed:
			return &exitError{code: 1, err: fmt.Errorf("task %s failed: %s", name, t.Status.Error)}
		case dotsv1.TaskCancelled:
			return &exitError{code: 1, err: fmt.Errorf("task %s was cancelled", name)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func newDecisionCommand(decision dotsv1.ApprovalDecision) *cobra.Command {
	var (
		cn     conn
		always bool
		note   string
		// forLong bounds --always (1h, endOfDay); forTask allows the
		// permission for the rest of the task (a call asked because the Dot
		// read untrusted input).
		forLong string
		forTask bool
	)
	verb := string(decision)
	cmd := &cobra.Command{
		Use:   verb + " APPROVAL",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " what a Dot asked (writes the Approval's decision, as kubectl patch can)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			if forLong != "" && forLong != wire.AlwaysForHour && forLong != wire.AlwaysForEndOfDay {
				return fmt.Errorf("--for is %s or %s", wire.AlwaysForHour, wire.AlwaysForEndOfDay)
			}
			if forLong != "" && !always {
				return fmt.Errorf("--for bounds --always: give --always too")
			}
			return decideWith(cmd.Context(), c, args[0], decision, always, note, cmd.OutOrStdout(), func(a *dotsv1.Approval) {
				a.Spec.AlwaysFor = forLong
				if forTask {
					a.Spec.Scope = wire.ScopeTask
				}
			})
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	if decision == dotsv1.Approve {
		cmd.Flags().BoolVar(&always, "always", false, "also allow this permission from now on (the Dot's spec is changed)")
		cmd.Flags().StringVar(&forLong, "for", "", "with --always: allow for 1h or until endOfDay only (the Dot's spec.allowUntil)")
		cmd.Flags().BoolVar(&forTask, "for-task", false, "a call asked because the Dot read untrusted input: also allow this permission for the rest of the task")
	}
	cmd.Flags().StringVar(&note, "note", "", "a note the Dot reads with the decision")
	return cmd
}

// ExitAlreadyAnswered is the exit code of approve and reject when the
// Approval was answered already (or its task ended and it no longer waits):
// nothing was written, and the answer that counts is the one it names.
const ExitAlreadyAnswered = 3

// decide writes a decision over the version of the Approval it read, so an
// answer given elsewhere meanwhile (the web client, kubectl patch, a chat)
// is never answered again: an Approval with a decision, read here or met by
// the API server's 409 already_resolved, is said with what it was and exits
// ExitAlreadyAnswered. The control plane writes the Approval too (its
// status), so a write that meets a newer version only for that reads it
// again and tries once more.
func decide(ctx context.Context, c *clients, name string, decision dotsv1.ApprovalDecision, always bool, note string, out io.Writer) error {
	return decideWith(ctx, c, name, decision, always, note, out, nil)
}

// decideWith is decide with more of the answer set on the Approval (how
// long an always lasts, the task's scope).
func decideWith(ctx context.Context, c *clients, name string, decision dotsv1.ApprovalDecision, always bool, note string, out io.Writer,
	more func(*dotsv1.Approval)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a := &dotsv1.Approval{}
		if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, a); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("no Approval %s in namespace %s (kubectl get approvals lists them)", name, c.ns)
			}
			return err
		}
		if a.Spec.Decision != "" {
			return &exitError{code: ExitAlreadyAnswered, err: fmt.Errorf("approval %s was already answered: %s; nothing was changed", name, approvalonce.Answered(a))}
		}
		if a.Status.Phase == dotsv1.ApprovalExpired {
			return &exitError{code: ExitAlreadyAnswered, err: fmt.Errorf("approval %s no longer waits: %s before anyone answered (Expired); nothing was changed", name, approvalonce.EndedWhy(a))}
		}
		if always && protocol.OneTimePermission(a.Spec.Permission) {
			return fmt.Errorf("approval %s asks for more spend, once: --always is not for it; nothing was changed", name)
		}
		base := a.DeepCopy()
		a.Spec.Decision, a.Spec.Always, a.Spec.Note = decision, always, note
		if more != nil {
			more(a)
		}
		err := c.kube.Patch(ctx, a, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if approvalonce.IsAlreadyResolved(err) {
			// Answered between the read and the write. Not the API's
			// error itself: a Conflict would be tried again.
			var s apierrors.APIStatus
			errors.As(err, &s)
			return &exitError{code: ExitAlreadyAnswered, err: errors.New(strings.TrimPrefix(s.Status().Message, wire.CodeAlreadyResolved+": "))}
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "approval %s: %s\n", name, decision)
	return nil
}

func newChatCommand() *cobra.Command {
	var (
		cn      conn
		message string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "chat DOT [-m TEXT]",
		Short: "Talk with a Dot: each line is sent and its answer printed, with a line for each tool it runs and its questions asked inline; -m sends one message and exits",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			dot := args[0]
			out := cmd.OutOrStdout()
			if message != "" {
				// Scripted: an approval is named, to answer with approve
				// or reject, not asked.
				return say(cmd.Context(), c, dot, message, timeout, out, nil)
			}
			in := bufio.NewScanner(cmd.InOrStdin())
			fmt.Fprintf(out, "talking with %s; an empty line or Ctrl-D ends\n> ", dot)
			for in.Scan() {
				line := strings.TrimSpace(in.Text())
				if line == "" {
					return nil
				}
				if err := say(cmd.Context(), c, dot, line, timeout, out, in); err != nil {
					return err
				}
				fmt.Fprint(out, "> ")
			}
			return in.Err()
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	cmd.Flags().StringVarP(&message, "message", "m", "", "send this one message, print the answer and exit")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for an answer (a sleeping Dot wakes first)")
	return cmd
}

// chatEvents are the log's events a chat shows while it waits for an
// answer (Converse follows the answers itself).
var chatEvents = []string{protocol.EventToolCalled, protocol.EventApprovalRequested}

// say sends one message and waits for the answer to it, which it prints: a
// quiet line for each tool the Dot runs meanwhile, and each approval it
// asks for, asked of the person on ask (y, N or always), or, with no ask,
// named for invisible-dots approve or reject. Only the chat's own are
// shown: a task running meanwhile has its own log.
func say(ctx context.Context, c *clients, dot, text string, timeout time.Duration, out io.Writer, ask *bufio.Scanner) error {
	x, err := c.dots.Converse(ctx, c.ns, dot, text, dotsclient.ConverseOptions{
		Wait:  timeout,
		Types: chatEvents,
		OnEvent: func(ctx context.Context, e wire.StreamEvent) error {
			switch e.Type {
			case protocol.EventToolCalled:
				var d protocol.ToolCalled
				if json.Unmarshal(e.Data, &d) == nil && d.TaskID == nil {
					fmt.Fprintln(out, "  · "+eventtext.ToolLine(d))
				}
			case protocol.EventApprovalRequested:
				var d protocol.ApprovalRequested
				if json.Unmarshal(e.Data, &d) == nil && d.TaskID == nil {
					return askApproval(ctx, c, dot, d, out, ask)
				}
			}
			return nil
		},
	})
	if errors.Is(err, dotsclient.ErrNoAnswer) {
		return &exitError{code: 1, err: errors.New("no answer within " + timeout.String() + ": the message is queued and the Dot answers when it can (invisible-dots chat shows it later)")}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, x.Answer.Text)
	return nil
}

// askApproval shows what the Dot asks and, on a terminal session, asks the
// person: approve? [y/N/always]. Scripted (ask nil), it names the Approval
// to answer.
func askApproval(ctx context.Context, c *clients, dot string, d protocol.ApprovalRequested, out io.Writer, ask *bufio.Scanner) error {
	name := dotsv1.ApprovalName(dot, d.ApprovalID)
	fmt.Fprintf(out, "  ? %s %s\n", dot, eventtext.ApprovalLine(d))
	fmt.Fprintf(out, "    %s\n", eventtext.RiskLine(d.Permission, d.Tool, d.Arguments))
	if ask == nil {
		fmt.Fprintf(out, "    answer it with: invisible-dots approve %s [--always], or invisible-dots reject %s\n", name, name)
		return nil
	}
	fmt.Fprint(out, "    approve? [y/N/always] ")
	answer := ""
	if ask.Scan() {
		answer = strings.ToLower(strings.TrimSpace(ask.Text()))
	}
	decision, always := dotsv1.Reject, false
	switch answer {
	case "y", "yes":
		decision = dotsv1.Approve
	case "always", "a":
		decision, always = dotsv1.Approve, true
	}
	// The control plane makes the Approval once it read the request from
	// the log: wait for it a little.
	for wait := time.Now().Add(30 * time.Second); ; {
		err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, &dotsv1.Approval{})
		if err == nil || !apierrors.IsNotFound(err) || time.Now().After(wait) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	err := decide(ctx, c, name, decision, always, "", out)
	var coded *exitError
	if errors.As(err, &coded) && coded.code == ExitAlreadyAnswered {
		// Answered elsewhere meanwhile: said, and the talk goes on.
		fmt.Fprintln(out, "    "+coded.Error())
		return nil
	}
	return err
}
