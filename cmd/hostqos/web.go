package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
)

// hostqos web: a login of hostqosd's local web view (docs/web.md).

func newWebCmd(f *factory) *cobra.Command {
	var output cliflag.Output
	var noBrowser bool
	c := &cobra.Command{
		Use:   "web [--no-browser] [-o json]",
		Short: "Open the local web view: print its URL with a fresh login token (and open a browser when there is a display)",
		Long: `web asks hostqosd for a fresh login token of its web view, for your user, and
prints the URL that logs in with it. When a display is there (DISPLAY or
WAYLAND_DISPLAY) and xdg-open is installed, it opens the URL in your browser
too. The web view acts as the user the token was made for: an ordinary user
sees what hostqos stat shows them and may change nothing; root and group
hostqos may change rules from it. A token works for 12 hours; the page turns
it into a cookie, so it leaves the address bar.

The daemon serves the web view only with [web] listen in its config file (or
hostqosd --web-listen); see docs/web.md. From another machine, forward the
port over SSH: ssh -L 9465:127.0.0.1:9465 HOST, then open the URL there.

-o json prints the login: url, base, token, expires, uid.`,
		Example: "  hostqos web\n  hostqos web --no-browser\n  hostqos web -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := apiCtx()
			defer cancel()
			login, err := f.client().WebToken(ctx)
			if err != nil {
				return err
			}
			if output == cliflag.JSON {
				return printJSON(f.io.Out, login)
			}
			printWebLogin(f.io.Out, login)
			if !noBrowser && hasDisplay() {
				if xdg, err := exec.LookPath("xdg-open"); err == nil {
					if err := exec.Command(xdg, login.URL).Start(); err != nil {
						fmt.Fprintf(f.io.Err, "hostqos web: open a browser with xdg-open: %v\n", err)
					}
				}
			}
			return nil
		},
	}
	cliflag.AddOutput(c.Flags(), &output)
	c.Flags().BoolVar(&noBrowser, "no-browser", false, "only print the URL, even when a display is there")
	return c
}

// hasDisplay says whether a graphical session is there to open a browser in.
func hasDisplay() bool { return os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != "" }

func printWebLogin(w io.Writer, l api.WebLogin) {
	fmt.Fprintf(w, "%s\n", l.URL)
	fmt.Fprintf(w, "(a login of uid %d for the web view, good until %s; keep it secret)\n", l.UID, l.Expires.Local().Format("2006-01-02 15:04"))
}
