package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// newComputerCommand is `invisible-dots computer start|stop|reboot NAME`:
// thin writes of the same spec field and annotations kubectl can write. The
// Computer reconciler does the work.
func newComputerCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "computer",
		Short: "Start, stop or reboot a Dot's computer (writes its Computer resource, as kubectl can)",
		Long: `computer start|stop|reboot NAME writes the Computer resource of that name through the
kubeconfig ($KUBECONFIG, else the home's; or --kubeconfig); the server's Computer reconciler acts on it:

  stop    sets spec.runStrategy to Halted: the guest is asked to power off; its
          automations pause until it is started again
  start   sets spec.runStrategy back to OnDemand when it is Halted, and annotates
          ` + dotsv1.StartRequestedAnnotation + `=<now> so a sleeping or exited VM starts once
  reboot  annotates ` + dotsv1.RebootRequestedAnnotation + `=<now>: stop, then start (a new runtime
          image, CPU count or memory size applies)

The same with kubectl:
  kubectl patch computer NAME --type merge -p '{"spec":{"runStrategy":"Halted"}}'
  kubectl annotate --overwrite computer NAME ` + dotsv1.RebootRequestedAnnotation + `="$(date -Is)"

Follow it with: kubectl get computer NAME -w`,
	}
	addConnFlags(cmd.PersistentFlags(), &cn)
	// Each verb is the Computer's own power rule (api/v1alpha1
	// computer_power.go), so this command writes what the Dots API, the web
	// client and the control plane write.
	for _, a := range []struct {
		use, short string
		mutate     func(c *dotsv1.Computer, now time.Time) error
	}{
		{"start NAME", "Start the computer (and lift a person's stop)", func(c *dotsv1.Computer, now time.Time) error { c.RequestStart(now); return nil }},
		{"stop NAME", "Stop the computer for the person (runStrategy Halted; automations pause)", func(c *dotsv1.Computer, _ time.Time) error { c.Halt(); return nil }},
		{"reboot NAME", "Reboot the computer (stop, then start)", (*dotsv1.Computer).RequestReboot},
	} {
		a := a
		cmd.AddCommand(&cobra.Command{
			Use:   a.use,
			Short: a.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cs, err := cn.clients()
				if err != nil {
					return err
				}
				c, namespace := cs.kube, cs.ns
				verb := a.use[:len(a.use)-len(" NAME")]
				if err := patchComputer(cmd.Context(), c, client.ObjectKey{Namespace: namespace, Name: args[0]}, a.mutate); err != nil {
					return fmt.Errorf("%s computer %s/%s: %w", verb, namespace, args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "computer %s/%s: %s requested (follow it: kubectl get computer %s -n %s -w)\n", namespace, args[0], verb, args[0], namespace)
				return nil
			},
		})
	}
	return cmd
}

// patchComputer reads the Computer, applies mutate, and writes the
// difference as a merge patch with the resourceVersion it read (a
// concurrent writer makes it fail instead of being overwritten).
func patchComputer(ctx context.Context, c client.Client, key client.ObjectKey, mutate func(*dotsv1.Computer, time.Time) error) error {
	cur := &dotsv1.Computer{}
	if err := c.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no such Computer (kubectl get computers -A lists them): %w", err)
		}
		return err
	}
	base := cur.DeepCopy()
	if err := mutate(cur, time.Now()); err != nil {
		return err
	}
	return c.Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// homeClient is a client of the server whose kubeconfig is in the home.
func homeClient() (client.Client, error) {
	h, err := home.FromEnv()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(h.Kubeconfig()); err != nil {
		return nil, fmt.Errorf("no kubeconfig at %s: start the server with 'invisible-dots server' (%w)", h.Kubeconfig(), err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", h.Kubeconfig(), err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}
