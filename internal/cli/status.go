package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
)

func newStatusCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Every Dot of the namespace in one table, and whether the hosts are ready",
		Long: `status shows each Dot of the namespace: its phase, its computer, the task it
works on with its newest progress line, the approvals it waits for, what its
model spent since midnight, and its next automation; then one line for the
hosts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			return printStatus(cmd.Context(), c, cmd.OutOrStdout())
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	return cmd
}

func printStatus(ctx context.Context, c *clients, out io.Writer) error {
	var dots dotsv1.DotList
	if err := c.kube.List(ctx, &dots, client.InNamespace(c.ns)); err != nil {
		return fmt.Errorf("list the Dots of namespace %s: %w", c.ns, err)
	}
	var computers dotsv1.ComputerList
	if err := c.kube.List(ctx, &computers, client.InNamespace(c.ns)); err != nil {
		return fmt.Errorf("list the Computers of namespace %s: %w", c.ns, err)
	}
	computerOf := map[string]*dotsv1.Computer{}
	for i := range computers.Items {
		computerOf[computers.Items[i].Name] = &computers.Items[i]
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DOT\tPHASE\tCOMPUTER\tTASK\tAPPROVALS\tSPENT TODAY\tNEXT AUTOMATION")
	y, m, day := time.Now().Date()
	midnight := time.Date(y, m, day, 0, 0, 0, 0, time.Local)
	for _, d := range dots.Items {
		computer, next := "-", "-"
		if cp := computerOf[d.Name]; cp != nil {
			computer = cmp.Or(string(cp.Status.State), "-")
			if cp.Status.StopReason != "" && cp.Status.State == dotsv1.ComputerStopped {
				computer += " (" + string(cp.Status.StopReason) + ")"
			}
			if t := cp.Status.NextAutomationTime; t != nil {
				next = t.Local().Format("2006-01-02 15:04")
			}
		}
		task := "-"
		if d.Status.CurrentTask != "" {
			task = d.Status.CurrentTask
			t := &dotsv1.Task{}
			if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: d.Status.CurrentTask}, t); err == nil && t.Status.Progress != "" {
				task += ": " + eventtext.Cut(t.Status.Progress, 50)
			}
		}
		spent := "-"
		if u, err := c.dots.Usage(ctx, c.ns, d.Name, wire.UsageQuery{Since: &midnight}); err == nil {
			spent = fmt.Sprintf("$%.4f", u.SpentUSD)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.Name, cmp.Or(string(d.Status.Phase), "-"), computer, task, d.Status.PendingApprovals, spent, next)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(dots.Items) == 0 {
		fmt.Fprintf(out, "no Dots in namespace %s\n", c.ns)
	}
	fmt.Fprintln(out, hostsLine(ctx, c))
	return nil
}

// hostsLine says in one line whether the hosts are ready.
func hostsLine(ctx context.Context, c *clients) string {
	var hosts dotsv1.HostList
	if err := c.kube.List(ctx, &hosts); err != nil {
		if apierrors.IsForbidden(err) {
			return "hosts: not visible to you (Hosts are cluster-wide)"
		}
		return "hosts: cannot be listed: " + err.Error()
	}
	if len(hosts.Items) == 0 {
		return "hosts: none has registered: is the server (or an agent) running?"
	}
	var parts []string
	for _, h := range hosts.Items {
		ready := meta.FindStatusCondition(h.Status.Conditions, dotsv1.ReadyCondition)
		switch {
		case ready == nil:
			parts = append(parts, h.Name+" has not reported")
		case ready.Status == "True":
			parts = append(parts, fmt.Sprintf("%s ready (%s, %d CPUs, %s memory for VMs)", h.Name, cmp.Or(string(h.Status.Accelerator), "?"), h.Status.Allocatable.CPU, h.Status.Allocatable.Memory.String()))
		default:
			parts = append(parts, fmt.Sprintf("%s not ready: %s (since %s)", h.Name, eventtext.Cut(ready.Message, 100), ready.LastTransitionTime.Local().Format(time.Kitchen)))
		}
	}
	return "hosts: " + strings.Join(parts, "; ")
}
