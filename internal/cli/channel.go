package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	qrcode "github.com/skip2/go-qrcode"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Environment variables of the channels (ref 9.8).
const (
	// envTelegramAPI is the Telegram Bot API's base URL (a test points it
	// at a fake).
	envTelegramAPI = "INVISIBLE_DOTS_TELEGRAM_API"
)

// channelKinds are the channel types this server runs.
func channelKinds() hub.Kinds {
	return hub.Kinds{"telegram": telegram.Kind(os.Getenv(envTelegramAPI))}
}

// notPrivate is said wherever a person links Telegram.
const notPrivate = "Telegram bot chats are not end-to-end encrypted: Telegram can read what you and the Dot write there."

// newChannelCommand is `invisible-dots channel add|token|pair|ls|unpair|rm`:
// a Dot's messaging channels (ref 9.8), Channel resources and the Dots
// API's channel routes.
func newChannelCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "channel",
		Short: "Link a Dot to Telegram, pair people's phones with it, list and remove its channels",
		Long: `channel links a Dot to a chat service, so people talk to it, and answer its
approvals, from the chat app on their phone:

  invisible-dots channel add telegram --dot helper     # the bot's token, from @BotFather
  invisible-dots channel pair --dot helper             # a one-time code, its link and a QR
  invisible-dots channel ls
  invisible-dots channel rm --dot helper

A Channel is a resource too: kubectl get channels; kubectl patch channel
helper-telegram --type merge -p '{"spec":{"enabled":false}}' pauses it.`,
	}
	addConnFlags(cmd.PersistentFlags(), &cn)
	var dot, typ string
	dotFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&dot, "dot", "", "the Dot (required)")
		_ = c.MarkFlagRequired("dot")
	}
	typeFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&typ, "type", "telegram", "the channel's type")
	}

	add := &cobra.Command{
		Use:   "add telegram --dot NAME",
		Short: "Link the Dot to a Telegram bot; its token is read from a terminal without echo, or from standard input",
		Long: `add telegram links the Dot to a Telegram bot you made with @BotFather. The
bot's token is read from the terminal without echo, or from standard input,
never from an argument (an argument stays in the shell's history and the
process list). Telegram is asked who the bot is before anything is stored.
One bot serves one Dot.

` + notPrivate + `

  invisible-dots channel add telegram --dot helper
  printf '%s' "$BOT_TOKEN" | invisible-dots channel add telegram --dot helper`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("name the service: channel add telegram --dot NAME (the token is read from standard input, never from an argument)")
			}
			if args[0] != "telegram" {
				if args[0] == "whatsapp" {
					return fmt.Errorf("WhatsApp is linked by scanning a code: invisible-dots channel link whatsapp --dot NAME")
				}
				return fmt.Errorf("%q is not a channel that takes a token: channel add telegram --dot NAME", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), notPrivate)
			token, err := readSecretValue(cmd.InOrStdin(), cmd.ErrOrStderr(), "the bot's token", "invisible-dots channel add telegram --dot "+dot)
			if err != nil {
				return err
			}
			linked, err := c.dots.AddChannel(cmd.Context(), c.ns, dot, wire.ChannelAdd{Type: args[0], Token: token})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "linked Dot %s/%s to the Telegram bot @%s (Channel %s)\npair your phone with it: invisible-dots channel pair --dot %s\n",
				c.ns, dot, linked.Account.Name, linked.Name, dot)
			return nil
		},
	}
	dotFlags(add)
	cmd.AddCommand(add)

	token := &cobra.Command{
		Use:   "token --dot NAME",
		Short: "Give the Dot's Telegram channel its bot's token again (after Telegram revoked it); the people paired stay",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			token, err := readSecretValue(cmd.InOrStdin(), cmd.ErrOrStderr(), "the bot's token", "invisible-dots channel token --dot "+dot)
			if err != nil {
				return err
			}
			linked, err := c.dots.SetChannelCredentials(cmd.Context(), c.ns, dot, channelName(dot, typ), token)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Channel %s has its token again (@%s); the link starts again\n", linked.Name, linked.Account.Name)
			return nil
		},
	}
	dotFlags(token)
	typeFlag(token)
	cmd.AddCommand(token)

	var noQR bool
	pair := &cobra.Command{
		Use:   "pair --dot NAME",
		Short: "Make a one-time code (10 minutes) that pairs a person's phone with the Dot's channel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			code, err := c.dots.PairingCode(cmd.Context(), c.ns, dot, channelName(dot, typ))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Send this to the bot in a private chat, before %s:\n\n  %s\n\n", code.ExpiresAt.Local().Format(time.Kitchen), code.Words)
			if code.Link != "" {
				fmt.Fprintf(out, "or open this link on the phone:\n\n  %s\n\n", code.Link)
				if f, ok := cmd.OutOrStdout().(*os.File); ok && term.IsTerminal(int(f.Fd())) && !noQR {
					if q, err := qrcode.New(code.Link, qrcode.Medium); err == nil {
						fmt.Fprintln(out, "or scan it:")
						fmt.Fprintln(out, q.ToSmallString(false))
					}
				}
			}
			fmt.Fprintln(out, "The code works once. Whoever sends it becomes an owner: they talk to the Dot, get its task endings and answer its approvals there.")
			return nil
		},
	}
	dotFlags(pair)
	typeFlag(pair)
	pair.Flags().BoolVar(&noQR, "no-qr", false, "print no QR code")
	cmd.AddCommand(pair)

	var lsDot string
	ls := &cobra.Command{
		Use:   "ls [--dot NAME]",
		Short: "List the namespace's channels (or one Dot's): state, account, people paired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			var list dotsv1.ChannelList
			if err := c.kube.List(cmd.Context(), &list, client.InNamespace(c.ns)); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDOT\tTYPE\tSTATE\tACCOUNT\tPEOPLE\tDETAIL")
			for _, ch := range list.Items {
				if lsDot != "" && ch.Spec.DotName != lsDot {
					continue
				}
				account := "-"
				if a := ch.Status.Account; a != nil && a.Name != "" {
					account = "@" + a.Name
				}
				var people []string
				for _, p := range ch.Status.People {
					who := p.ID
					if p.Label != "" {
						who = p.Label + " (" + p.ID + ")"
					}
					people = append(people, who)
				}
				state := string(ch.Status.State)
				if state == "" {
					state = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ch.Name, ch.Spec.DotName, ch.Spec.Type, state, account, orDash(strings.Join(people, ", ")), orDash(ch.Status.Detail))
			}
			return w.Flush()
		},
	}
	ls.Flags().StringVar(&lsDot, "dot", "", "only this Dot's channels")
	cmd.AddCommand(ls)

	unpair := &cobra.Command{
		Use:   "unpair --dot NAME PERSON",
		Short: "Take a person's pairing away (PERSON is their id, as channel ls lists it in brackets)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			if err := c.dots.Unpair(cmd.Context(), c.ns, dot, channelName(dot, typ), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unpaired %s from Channel %s\n", args[0], channelName(dot, typ))
			return nil
		},
	}
	dotFlags(unpair)
	typeFlag(unpair)
	cmd.AddCommand(unpair)

	rm := &cobra.Command{
		Use:   "rm --dot NAME",
		Short: "Remove the Dot's channel: the link stops, its token, its people and their pairings go",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			ch := &dotsv1.Channel{}
			ch.Namespace, ch.Name = c.ns, channelName(dot, typ)
			if err := c.kube.Delete(cmd.Context(), ch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed Channel %s/%s: its token, people and pairings go with it\n", c.ns, ch.Name)
			return nil
		},
	}
	dotFlags(rm)
	typeFlag(rm)
	cmd.AddCommand(rm)
	return cmd
}

// channelName is the name of the Dot's Channel of typ, as the Dots API
// makes it.
func channelName(dot, typ string) string { return dot + "-" + typ }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
