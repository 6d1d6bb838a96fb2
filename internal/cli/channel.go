package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	qrcode "github.com/skip2/go-qrcode"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"

	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Environment variables of the channels (ref 9.8).
const (
	// envTelegramAPI is the Telegram Bot API's base URL (a test points it
	// at a fake).
	envTelegramAPI = "INVISIBLE_DOTS_TELEGRAM_API"
	// envWhatsApp turns WhatsApp on ("1"): it is opt-in, a separate
	// program (make whatsapp), and unofficial.
	envWhatsApp = "INVISIBLE_DOTS_WHATSAPP"
	// envWhatsAppProgram names the WhatsApp program when it is neither
	// next to the server's executable nor on PATH.
	envWhatsAppProgram = "INVISIBLE_DOTS_WHATSAPP_PROGRAM"
)

// channelKinds are the channel types this server runs: Telegram always,
// WhatsApp when INVISIBLE_DOTS_WHATSAPP=1 and its program starts (it runs
// until ctx ends); links are WhatsApp's link codes, nil without it.
func channelKinds(ctx context.Context, layout home.Layout, log logr.Logger) (kinds hub.Kinds, links *port.Links) {
	kinds = hub.Kinds{"telegram": telegram.Kind(os.Getenv(envTelegramAPI))}
	if os.Getenv(envWhatsApp) != "1" {
		return kinds, nil
	}
	prog, err := port.Launch(ctx, port.LaunchOptions{
		Program: os.Getenv(envWhatsAppProgram), Dir: filepath.Join(layout.Run(), "whatsapp"), Log: log.WithName("whatsapp"),
	})
	if err != nil {
		// The server runs without it; linking WhatsApp answers how to
		// turn it on.
		log.Error(err, "WhatsApp is off: its program did not start")
		return kinds, nil
	}
	links = port.NewLinks()
	kinds["whatsapp"] = hub.WhatsApp(prog.Dial, log.WithName("whatsapp"))
	log.Info("WhatsApp is on (unofficial: a linked device of a personal account)", "socket", prog.Socket())
	return kinds, links
}

// The warnings said where a person links a channel (wire.ChannelWarnings).
var (
	whatsAppRisk = wire.ChannelWarnings["whatsapp"]
	notPrivate   = wire.ChannelWarnings["telegram"]
)

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

	link := &cobra.Command{
		Use:   "link whatsapp --dot NAME",
		Short: "Link the Dot to WhatsApp as a linked device of a phone's account, by scanning codes in the terminal (opt-in, unofficial)",
		Long: `link whatsapp makes the Dot a linked device of a WhatsApp account: it prints
codes as QR codes until the phone scanned one (Settings, Linked devices, Link
a device), then how to pair people. The server must run WhatsApp
(INVISIBLE_DOTS_WHATSAPP=1 and the program make whatsapp builds).

` + whatsAppRisk,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] != "whatsapp" {
				return fmt.Errorf("only WhatsApp is linked by a code: channel link whatsapp --dot NAME (Telegram: channel add telegram --dot NAME)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			errOut, out := cmd.ErrOrStderr(), cmd.OutOrStdout()
			fmt.Fprintln(errOut, whatsAppRisk)
			name := channelName(dot, "whatsapp")
			if _, err := c.dots.AddChannel(cmd.Context(), c.ns, dot, wire.ChannelAdd{Type: "whatsapp"}); err != nil {
				if dotsclient.CodeOf(err) == wire.CodeAlreadyExists {
					return fmt.Errorf("Dot %s has a WhatsApp channel already (%s): to link it again, remove it first (invisible-dots channel rm --dot %s --type whatsapp)", dot, name, dot)
				}
				return err
			}
			var failed string
			err = c.dots.LinkChannel(cmd.Context(), c.ns, dot, name, func(f wire.ChannelLinkFrame) {
				switch {
				case f.Code != "":
					fmt.Fprintln(out, "Scan this with WhatsApp on the phone (Settings, Linked devices, Link a device):")
					if q, err := qrcode.New(f.Code, qrcode.Low); err == nil {
						fmt.Fprintln(out, q.ToSmallString(false))
					}
				case f.Linked != "":
					fmt.Fprintf(out, "linked Dot %s/%s to WhatsApp %s (Channel %s)\npair people with it: invisible-dots channel pair --dot %s --type whatsapp\n", c.ns, dot, f.Linked, name, dot)
				case f.Failed != "":
					failed = f.Failed
				}
			})
			if err != nil {
				return err
			}
			if failed != "" {
				return fmt.Errorf("WhatsApp was not linked: %s; try again: invisible-dots channel rm --dot %s --type whatsapp, then channel link whatsapp --dot %s", failed, dot, dot)
			}
			return nil
		},
	}
	dotFlags(link)
	cmd.AddCommand(link)

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

// channelName is the name of the Dot's Channel of typ.
func channelName(dot, typ string) string { return dotsv1.ChannelName(dot, dotsv1.ChannelType(typ)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
