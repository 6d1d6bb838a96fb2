package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
)

// newQuotaCommand is `invisible-dots quota [set]`: the namespace's caps
// (its DotQuota) and what it uses of them.
func newQuotaCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show the namespace's caps (active Dots, spend per day) and what it uses of them",
		Long: `quota shows the namespace's DotQuota: how many Dots may run at once and how
much its Dots may spend in a day, against what they use now.

  invisible-dots quota
  invisible-dots quota set --active-dots 4 --spend-per-day 10
  invisible-dots quota set --active-dots none

A Dot beyond the active cap stays inactive (its computer is not started, its
work waits) until another Dot's computer stops; lowering the cap stops nothing.
Setting the quota is for whoever administers the namespace (the admin role);
an editor of Dots may read it. It is a resource: kubectl get dotquota default.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			q := &dotsv1.DotQuota{}
			err = c.kube.Get(cmd.Context(), client.ObjectKey{Namespace: c.ns, Name: dotsv1.DotQuotaName}, q)
			if apierrors.IsNotFound(err) {
				fmt.Fprintf(cmd.OutOrStdout(), "namespace %s has no DotQuota: no cap on active Dots or spend (set one with 'invisible-dots quota set --active-dots N --spend-per-day USD')\n", c.ns)
				return nil
			}
			if err != nil {
				return err
			}
			printQuota(cmd.OutOrStdout(), q)
			return nil
		},
	}
	addConnFlags(cmd.PersistentFlags(), &cn)

	var active, perDay, timeZone string
	set := &cobra.Command{
		Use:   "set [--active-dots N|none] [--spend-per-day USD|none] [--time-zone ZONE]",
		Short: "Set the namespace's caps (made when it has none)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("active-dots") && !cmd.Flags().Changed("spend-per-day") && !cmd.Flags().Changed("time-zone") {
				return fmt.Errorf("say what to set: --active-dots, --spend-per-day or --time-zone")
			}
			c, err := cn.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q := &dotsv1.DotQuota{}
			err = c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: dotsv1.DotQuotaName}, q)
			found := err == nil
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if !found {
				q = &dotsv1.DotQuota{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: dotsv1.DotQuotaName}}
			}
			before := q.DeepCopy()
			if err := applyQuotaFlags(&q.Spec, cmd.Flags().Changed("active-dots"), active, cmd.Flags().Changed("spend-per-day"), perDay); err != nil {
				return err
			}
			if cmd.Flags().Changed("time-zone") {
				q.Spec.TimeZone = timeZone
			}
			if found {
				err = c.kube.Patch(ctx, q, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
			} else {
				err = c.kube.Create(ctx, q)
			}
			if err != nil {
				return fmt.Errorf("set the DotQuota of namespace %s: %w", c.ns, err)
			}
			printQuota(cmd.OutOrStdout(), q)
			return nil
		},
	}
	set.Flags().StringVar(&active, "active-dots", "", "how many Dots of the namespace may run at once (none: no cap)")
	set.Flags().StringVar(&perDay, "spend-per-day", "", "US dollars the namespace's Dots may spend in a day, e.g. 10 or 12.50 (none: no cap)")
	set.Flags().StringVar(&timeZone, "time-zone", "", "where the day begins, an IANA name (UTC when empty)")
	cmd.AddCommand(set)
	var extra string
	for _, decision := range []dotsv1.ApprovalDecision{dotsv1.Approve, dotsv1.Reject} {
		use, short := "approve [--extra USD]", "Allow the namespace more spend today (the suggested amount unless --extra); held work flows again"
		if decision == dotsv1.Reject {
			use, short = "reject", "Refuse more spend today: the held tasks fail, messages wait for the next day"
		}
		sub := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				c, err := cn.clients()
				if err != nil {
					return err
				}
				ctx := cmd.Context()
				q := &dotsv1.DotQuota{}
				if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: dotsv1.DotQuotaName}, q); err != nil {
					return fmt.Errorf("read the DotQuota of namespace %s: %w", c.ns, err)
				}
				want, err := lifecycle.AnswerSpend(q, decision, strings.TrimPrefix(extra, "$"))
				if err != nil {
					return err
				}
				before := q.DeepCopy()
				q.Spec.SpendDecision = want
				if err := c.kube.Patch(ctx, q, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
					return fmt.Errorf("answer the request of namespace %s: %w", c.ns, err)
				}
				if decision == dotsv1.Approve {
					fmt.Fprintf(cmd.OutOrStdout(), "allowed $%s more today (%s) in namespace %s\n", *want.ExtraUSD, want.Day, c.ns)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "refused more spend today (%s) in namespace %s: its held tasks fail\n", want.Day, c.ns)
				}
				return nil
			},
		}
		if decision == dotsv1.Approve {
			sub.Flags().StringVar(&extra, "extra", "", "US dollars more for today (default: what the request suggests)")
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

// applyQuotaFlags writes --active-dots and --spend-per-day into spec;
// "none" removes a cap.
func applyQuotaFlags(spec *dotsv1.DotQuotaSpec, setActive bool, active string, setPerDay bool, perDay string) error {
	if setActive {
		if active == "none" {
			spec.ActiveDots = nil
		} else {
			n, err := strconv.ParseInt(active, 10, 32)
			if err != nil || n < 0 {
				return fmt.Errorf("--active-dots %q: a count of Dots (0 or more), or none", active)
			}
			spec.ActiveDots = ptr.To(int32(n))
		}
	}
	if setPerDay {
		perDay = strings.TrimPrefix(perDay, "$")
		if perDay == "none" {
			spec.SpendPerDayUSD = nil
		} else {
			if f, err := strconv.ParseFloat(perDay, 64); err != nil || f < 0 {
				return fmt.Errorf("--spend-per-day %q: US dollars, e.g. 10 or 12.50, or none", perDay)
			}
			spec.SpendPerDayUSD = ptr.To(perDay)
		}
	}
	return nil
}

// printQuota shows the caps beside what the namespace uses of them.
func printQuota(w io.Writer, q *dotsv1.DotQuota) {
	capOf := func(set bool, v string) string {
		if !set {
			return "no cap"
		}
		return v
	}
	active := capOf(q.Spec.ActiveDots != nil, fmt.Sprint(ptr.Deref(q.Spec.ActiveDots, 0)))
	perDay := capOf(q.Spec.SpendPerDayUSD != nil, "$"+ptr.Deref(q.Spec.SpendPerDayUSD, ""))
	fmt.Fprintf(w, "DotQuota %s/%s\n", q.Namespace, q.Name)
	fmt.Fprintf(w, "  active Dots:   %d of %s\n", q.Status.ActiveDots, active)
	if len(q.Status.Admitted) > 0 {
		fmt.Fprintf(w, "  admitted:      %s\n", strings.Join(q.Status.Admitted, ", "))
	}
	spent := q.Status.SpentTodayUSD
	if spent == "" {
		spent = "0.00"
	}
	day := q.Status.Day
	if day == "" {
		day = "today"
	}
	fmt.Fprintf(w, "  spent %s: $%s of %s\n", day, spent, perDay)
	if q.Spec.TimeZone != "" {
		fmt.Fprintf(w, "  day begins:    midnight %s\n", q.Spec.TimeZone)
	}
	if q.Status.ExtraTodayUSD != "" {
		fmt.Fprintf(w, "  allowed more:  $%s today\n", q.Status.ExtraTodayUSD)
	}
	if r := q.Status.SpendRequest; r != nil && r.Phase == dotsv1.SpendRequestPending {
		fmt.Fprintf(w, "  %s  invisible-dots quota approve -n %s (or reject)\n", r.Message, q.Namespace)
	}
	for _, t := range []string{dotsv1.ActiveDotsCapReachedCondition, dotsv1.SpendCapReachedCondition} {
		if c := meta.FindStatusCondition(q.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			fmt.Fprintf(w, "  %s: %s\n", t, c.Message)
		}
	}
}
