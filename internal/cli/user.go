package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/webui"
)

func newUserCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "People: credentials of their own for one namespace each",
	}
	cmd.AddCommand(newUserAddCommand())
	return cmd
}

func newUserAddCommand() *cobra.Command {
	var (
		namespace  string
		role       string
		kubeconfig string
		output     string
		ttl        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add NAME --namespace NS --role editor|viewer [--output FILE]",
		Short: "Print a kubeconfig for a person, who may then use the Dots of one namespace (editor) or look at them (viewer)",
		Long: `add gives a person a credential of their own: a ServiceAccount NAME in the
namespace (made if missing), bound there to dots-editor (apply Dots, chat,
hand tasks, answer approvals, add webhooks) or dots-viewer (look), and a token that lasts
--ttl. It prints the kubeconfig, its context set to that namespace:

  invisible-dots user add ada --namespace family --role editor --output ada.kubeconfig
  KUBECONFIG=ada.kubeconfig invisible-dots chat helper -m "hello"

Adding the person again prints a new token. To revoke every token of theirs:
  kubectl delete serviceaccount ada -n family

It uses the admin kubeconfig of this home's server, or --kubeconfig.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if namespace == "" {
				return fmt.Errorf("--namespace is required: the namespace whose Dots the person uses")
			}
			admin, err := adminKubeconfig(kubeconfig)
			if err != nil {
				return err
			}
			data, expires, err := controlplane.AddUser(cmd.Context(), *admin, args[0], namespace, role, ttl)
			if err != nil {
				return err
			}
			note := fmt.Sprintf("%s may %s the Dots of namespace %s until %s (%s); add them again for a new token",
				args[0], map[string]string{"editor": "use", "viewer": "look at"}[role], namespace, expires.UTC().Format(time.RFC3339), ttl)
			return writeCredential(cmd, output, data, note+"\n"+signInNote(kubeconfig))
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the person's namespace (required)")
	cmd.Flags().StringVar(&role, "role", "editor", "editor (use the Dots) or viewer (look at them)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "an administrator's kubeconfig (default: the home's)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the kubeconfig to this file (mode 0600) instead of standard output")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*24*time.Hour, "how long the token is valid")
	return cmd
}

// signInNote says where the person signs in to the web client with the
// kubeconfig or its token, as the home's running server published it.
func signInNote(kubeconfig string) string {
	if kubeconfig != "" {
		return "the web client of that server: sign in there with this kubeconfig file or its token, if it serves people's sign-in"
	}
	layout, err := home.FromEnv()
	if err != nil {
		return ""
	}
	p, ok := webui.ReadPublished(layout.WebAddress())
	switch {
	case !ok:
		return "the web client: start the server with --web-sign-in, then sign in at its address with this kubeconfig file or its token"
	case !p.SignIn:
		return "the web client at " + p.URL + " is the machine owner's alone: restart the server with --web-sign-in, then sign in there with this kubeconfig file or its token"
	}
	return "sign in to the web client at " + p.URL + " with this kubeconfig file or its token"
}
