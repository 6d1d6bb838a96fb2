package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
)

func newLogsCommand() *cobra.Command {
	var (
		cn     conn
		types  []string
		since  time.Duration
		tail   int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs DOT [-f] [--types t1,t2] [--since 1h] [--tail N]",
		Short: "Print a Dot's event log as readable lines, oldest first",
		Long: `logs prints what the Dot did, from its event log (GET
/dots/v1/namespaces/NS/dots/DOT/events), one line an event: its time, and
the same words for a tool call, an approval, a task or a state change as
the chat uses. -f goes on with the events as they are written (the live
stream, resumed where it was after a cut), until Ctrl-C.

  invisible-dots logs helper --since 1h
  invisible-dots logs helper -f --tail 20
  invisible-dots logs helper --types tool.called,approval.requested --tail 50`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			// Where the log ended before it was read: -f goes on from the
			// last event printed, or from here, so nothing written in
			// between is missed or printed twice.
			var end int64
			if follow {
				last, err := c.dots.Events(cmd.Context(), c.ns, args[0], wire.EventsQuery{Order: wire.OrderDesc, Limit: 1})
				if err != nil {
					return err
				}
				if len(last.Events) == 1 {
					end = last.Events[0].ID
				}
			}
			events, err := readLog(cmd.Context(), c, args[0], types, from, tail)
			if err != nil {
				return err
			}
			for _, e := range events {
				printEvent(cmd.OutOrStdout(), e)
			}
			if !follow {
				return nil
			}
			after := end
			if len(events) > 0 {
				after = max(after, events[len(events)-1].ID)
			}
			live, errc := c.dots.Stream(cmd.Context(), dotsclient.StreamOptions{Namespace: c.ns, Dot: args[0], Types: types, After: &after})
			for e := range live {
				printEvent(cmd.OutOrStdout(), e.Event)
			}
			if err := <-errc; err != nil {
				return err
			}
			return nil
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	cmd.Flags().StringSliceVar(&types, "types", nil, "only these event types (comma-separated: tool.called,task.completed)")
	cmd.Flags().DurationVar(&since, "since", 0, "only the events of this last while (1h, 30m)")
	cmd.Flags().IntVar(&tail, "tail", 0, "only the last N events (0: all)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing the events as they are written")
	return cmd
}

// readLog reads the Dot's events newest first, a page at a time, back to
// from (or the start) or until it holds tail of them, and returns them
// oldest first.
func readLog(ctx context.Context, c *clients, dot string, types []string, from time.Time, tail int) ([]wire.Event, error) {
	var out []wire.Event
	q := wire.EventsQuery{Types: types, Order: wire.OrderDesc, Limit: wire.MaxEventsPage}
	for {
		page, err := c.dots.Events(ctx, c.ns, dot, q)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Events {
			if (!from.IsZero() && e.CreatedAt.Before(from)) || (tail > 0 && len(out) == tail) {
				slices.Reverse(out)
				return out, nil
			}
			out = append(out, e)
		}
		if len(page.Events) < q.Limit {
			slices.Reverse(out)
			return out, nil
		}
		q.Before = page.Events[len(page.Events)-1].ID
	}
}

// printEvent prints one event as a line: its local time and its words.
func printEvent(w io.Writer, e wire.Event) {
	fmt.Fprintf(w, "%s  %s\n", e.CreatedAt.Local().Format("2006-01-02 15:04:05"), strings.TrimSpace(eventtext.Line(e)))
}
