package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/hooks"
)

// newWebhookCommand is `invisible-dots webhook add|ls|rm|rotate`: a Dot's
// Webhooks (signed doors that make Tasks): Webhook resources, written with
// the caller's credential, and their signing secrets, which the server
// makes and stores through the Dots API (people hold no Secrets).
func newWebhookCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Give a Dot a signed webhook that makes a Task for each delivery; list, remove, rotate its secret",
		Long: `webhook makes doors through which programs hand a Dot work: each delivery a
sender signs (GitHub's way, the Standard Webhooks way, or with a bearer token)
makes one Task, whose description is your template with the delivery's fields
put in, marked as coming from an untrusted sender.

  invisible-dots webhook add ci-red --dot helper --signature github \
      --description 'The build of {{.repository.full_name}} failed: {{.workflow_run.html_url}}. Find out why.'
  invisible-dots webhook ls
  invisible-dots webhook rotate ci-red
  invisible-dots webhook rm ci-red

The server serves them on ` + hooks.EnvListen + ` (host:port, off by default), at
POST /hooks/v1/NAMESPACE/NAME; put it behind a reverse proxy or a tunnel for
TLS and set ` + hooks.EnvURL + ` to its public URL, so the URLs printed here
are the ones senders reach. The secret is printed once, when it is made; the
server makes it and keeps it in a Secret the Webhook owns, so whoever may
manage Webhooks (the role dots-editor: user add NAME --role editor) adds and
rotates them without holding Secrets. A Webhook is a resource too:
kubectl get webhooks; kubectl patch webhook ci-red --type merge -p
'{"spec":{"paused":true}}' pauses it.

Template: {{.a.b}} is the field b of the object a of the JSON body, {{.list.0}}
an array's first item, {{.}} the whole body; nothing else is code.`,
	}
	addConnFlags(cmd.PersistentFlags(), &cn)

	var (
		dot, signature, description string
		priority                    int32
	)
	add := &cobra.Command{
		Use:   "add NAME --dot DOT --signature github|standard|token --description TEMPLATE",
		Short: "Make a Webhook for the Dot; its URL and secret are printed once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := hooks.CheckTemplate(description); err != nil {
				return fmt.Errorf("--description: %w", err)
			}
			if _, err := hooks.NewSecret(signature); err != nil {
				return fmt.Errorf("--signature: %w", err)
			}
			c, err := cn.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			d := &dotsv1.Dot{}
			if err := c.kube.Get(ctx, types.NamespacedName{Namespace: c.ns, Name: dot}, d); err != nil {
				return fmt.Errorf("Dot %s/%s: %w", c.ns, dot, err)
			}
			wh := &dotsv1.Webhook{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: c.ns, Name: name,
					// Owned by its Dot, gone with it (the Webhook controller
					// binds one applied without it the same way).
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: d.Name, UID: d.UID,
						Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
					}},
				},
				Spec: dotsv1.WebhookSpec{
					DotName:   dot,
					Signature: dotsv1.WebhookSignature(signature),
					SecretRef: dotsv1.WebhookSecretRef{Name: dotsv1.WebhookSecretName(name), Key: dotsv1.WebhookSecretKey},
					Task:      dotsv1.WebhookTaskTemplate{Description: description, Priority: priority},
				},
			}
			if err := c.kube.Create(ctx, wh); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("Webhook %s/%s exists already: give it a new secret with 'invisible-dots webhook rotate %s', or remove it first", c.ns, name, name)
				}
				return fmt.Errorf("create Webhook %s/%s: %w", c.ns, name, err)
			}
			// The server makes the secret and stores it in the Secret the
			// Webhook owns, with its own credential: the caller needs no
			// Secrets (dots-editor holds none).
			made, err := c.dots.NewWebhookSecret(ctx, c.ns, name)
			if err != nil {
				return fmt.Errorf("made Webhook %s/%s, but it has no secret yet, so it refuses every delivery: %w\n"+
					"Give it its secret with 'invisible-dots webhook rotate %s -n %s' (it prints the URL and the secret), or remove it with 'invisible-dots webhook rm %s -n %s'",
					c.ns, name, err, name, c.ns, name, c.ns)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "made Webhook %s/%s: each delivery makes a Task for Dot %s\n\n", c.ns, name, dot)
			printWebhookDoor(out, wh, made.Secret)
			if made.Warning != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", made.Warning)
			}
			return nil
		},
	}
	add.Flags().StringVar(&dot, "dot", "", "the Dot its Tasks are for (required)")
	add.Flags().StringVar(&signature, "signature", "github", "how deliveries are signed: github (X-Hub-Signature-256), standard (Standard Webhooks) or token (Authorization: Bearer)")
	add.Flags().StringVar(&description, "description", "", "the Task's description, with the payload's fields as {{.path.to.field}} (required)")
	add.Flags().Int32Var(&priority, "priority", 0, "the Tasks' priority (-100 to 100; higher runs first)")
	_ = add.MarkFlagRequired("dot")
	_ = add.MarkFlagRequired("description")
	cmd.AddCommand(add)

	var lsDot string
	ls := &cobra.Command{
		Use:   "ls [--dot NAME]",
		Short: "List the namespace's Webhooks (or one Dot's): scheme, paused, deliveries, last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			var list dotsv1.WebhookList
			if err := c.kube.List(cmd.Context(), &list, client.InNamespace(c.ns)); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDOT\tSIGNATURE\tPAUSED\tACCEPTED\tDUPLICATES\tREFUSED\tLAST DELIVERY\tLAST ERROR")
			for _, wh := range list.Items {
				if lsDot != "" && wh.Spec.DotName != lsDot {
					continue
				}
				last := "-"
				if t := wh.Status.LastDeliveryTime; t != nil {
					last = t.Local().Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%d\t%d\t%d\t%s\t%s\n", wh.Name, wh.Spec.DotName, wh.Spec.Signature, wh.Spec.Paused,
					wh.Status.Accepted, wh.Status.Duplicates, wh.Status.Refused, last, orDash(wh.Status.LastError))
			}
			return w.Flush()
		},
	}
	ls.Flags().StringVar(&lsDot, "dot", "", "only this Dot's Webhooks")
	cmd.AddCommand(ls)

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a Webhook: its URL refuses deliveries, its secret goes; the Tasks it made stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			wh := &dotsv1.Webhook{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: args[0]}}
			if err := c.kube.Delete(cmd.Context(), wh); err != nil {
				return fmt.Errorf("remove Webhook %s/%s: %w", c.ns, args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed Webhook %s/%s: its secret goes with it\n", c.ns, args[0])
			return nil
		},
	}
	cmd.AddCommand(rm)

	rotate := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Give a Webhook a new secret, printed once; the old one stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			wh := &dotsv1.Webhook{}
			if err := c.kube.Get(ctx, types.NamespacedName{Namespace: c.ns, Name: args[0]}, wh); err != nil {
				return fmt.Errorf("Webhook %s/%s: %w", c.ns, args[0], err)
			}
			// The server makes the new secret, stores it in the Secret the
			// Webhook owns and marks the Webhook rotated, which the
			// listener watches: the old secret is refused at once.
			made, err := c.dots.NewWebhookSecret(ctx, c.ns, wh.Name)
			if err != nil {
				return fmt.Errorf("a new secret for Webhook %s/%s: %w", c.ns, wh.Name, err)
			}
			if made.Warning != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", made.Warning)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Webhook %s/%s has a new secret; give it to its sender (the old one is refused from now on)\n\n", c.ns, wh.Name)
			printWebhookDoor(out, wh, made.Secret)
			return nil
		},
	}
	cmd.AddCommand(rotate)
	return cmd
}

// printWebhookDoor prints the Webhook's URL, its secret (this once) and how
// a sender signs.
func printWebhookDoor(out io.Writer, wh *dotsv1.Webhook, secret string) {
	base, known := hooksBaseURL()
	url := hooks.URL(base, wh.Namespace, wh.Name)
	fmt.Fprintf(out, "  URL:     %s\n  secret:  %s\n\n", url, secret)
	fmt.Fprintln(out, "The secret is shown this once; 'invisible-dots webhook rotate "+wh.Name+"' makes a new one.")
	switch wh.Spec.Signature {
	case dotsv1.WebhookGitHub:
		fmt.Fprintln(out, "On GitHub: Settings, Webhooks, Add webhook: the URL, content type application/json, the secret.")
		fmt.Fprintf(out, "From a shell (openssl takes the secret as an argument, which other users of this machine can see in ps):\n  body='{\"hello\":\"world\"}'\n  sig=$(printf '%%s' \"$body\" | openssl dgst -sha256 -hmac \"$SECRET\" | sed 's/^.*= //')\n"+
			"  curl -sS -X POST %s -H 'Content-Type: application/json' -H \"X-Hub-Signature-256: sha256=$sig\" -H \"X-GitHub-Delivery: $(date +%%s%%N)\" --data-binary \"$body\"\n", url)
	case dotsv1.WebhookStandard:
		fmt.Fprintln(out, "Give the sender the URL and the secret (whsec_...): it signs with webhook-id, webhook-timestamp and webhook-signature, and its timestamp must be within 5 minutes of this server's clock.")
	case dotsv1.WebhookToken:
		fmt.Fprintf(out, "The sender sends the secret as a bearer token (anyone who sees one request can send more: prefer a signature when the sender can sign; curl below takes it as an argument, which other users of this machine can see in ps):\n"+
			"  curl -sS -X POST %s -H \"Authorization: Bearer $SECRET\" -H \"Idempotency-Key: $(date +%%s%%N)\" --data-binary '{\"hello\":\"world\"}'\n", url)
	}
	if !known {
		fmt.Fprintf(out, "\n(The URL's address is a stand-in: set %s to the listener's public URL, or %s to where the server listens, and the URL printed is the real one.)\n", hooks.EnvURL, hooks.EnvListen)
	}
}

// hooksBaseURL is where senders reach the listener: INVISIBLE_DOTS_HOOKS_URL,
// else the address the server listens on (INVISIBLE_DOTS_HOOKS_LISTEN, as
// this command sees it), else a stand-in (known false).
func hooksBaseURL() (string, bool) {
	if u := strings.TrimSpace(os.Getenv(hooks.EnvURL)); u != "" {
		return u, true
	}
	if l := strings.TrimSpace(os.Getenv(hooks.EnvListen)); l != "" {
		host, port, err := net.SplitHostPort(l)
		if err == nil {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				host = "127.0.0.1"
			}
			return "http://" + net.JoinHostPort(host, port), true
		}
	}
	return "https://HOOKS-HOST", false
}
