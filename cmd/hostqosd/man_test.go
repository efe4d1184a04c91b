package main

import (
	"os"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/manpage"
)

// daemonPage is hostqosd(8) in markdown: the text of -h and the flags
// as newFlags defines them.
func daemonPage() string {
	fs, _ := newFlags()
	return `# NAME
hostqosd - the hostqos daemon: classifies, marks, limits and guarantees traffic per app and per flow

# SYNOPSIS
**hostqosd** [*flags*]

**hostqosd down** [*flags*]

**hostqosd --version**

# DESCRIPTION
**hostqosd** loads the eBPF datapath, builds the HTB trees, enforces the policy of
**hostqos.toml**(5) and of the changes made with **hostqos**(8), and serves the API
**hostqos**(8) and libhostqos (**qsock**(3)) talk to. It runs as root; the systemd
unit **hostqosd.service** starts it with only the capabilities it needs.

` + description + `

**hostqosd down** removes everything hostqos made in this network namespace —
classifiers, HTB trees, pins and cgroups — without a running daemon (what
**hostqos down** falls back to).

# OPTIONS
` + manpage.Flags(fs) + `Each flag of a setting overrides the config file's top-level key of the same name
(**--history-raw** and **history\_raw**); see **hostqos.toml**(5).

# SIGNALS
**SIGHUP**
: re-read the config file; an invalid file changes nothing

**SIGTERM**, **SIGINT**
: stop; the datapath keeps enforcing the last policy and the next start adopts it

# FILES
**/etc/hostqos/hostqos.toml**
: the policy (**--config**)

**/var/lib/hostqos**
: changes made through the API (**state.json**) and the history (**history.db**; **--state-dir**)

**/run/hostqos/hostqosd.sock**
: the API socket (**--socket**); **runtime.json** beside it holds temporary changes

**/sys/fs/bpf/hostqos**
: the pinned programs and maps (**--bpffs-dir**)

# SEE ALSO
**hostqos**(8), **hostqos.toml**(5), **qsock**(3), **systemd.exec**(5)
`
}

// TestManPages keeps hostqosd(8) what its flags make of it and
// hostqos.toml(5) what the config reference (docs/config.md) makes of it,
// in packaging/man/hostqosd; `make man` (HOSTQOS_UPDATE_MAN=1) writes them.
func TestManPages(t *testing.T) {
	date, err := manpage.Date("../../packaging/debian/changelog")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	config, err := manpage.Config(ref, date)
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string][]byte{
		"hostqosd.8":     manpage.Markdown("HOSTQOSD", "8", date, daemonPage()),
		"hostqos.toml.5": config,
	}
	if !strings.Contains(string(pages["hostqosd.8"]), "flow-table-size") {
		t.Errorf("hostqosd.8 does not list --flow-table-size:\n%s", pages["hostqosd.8"])
	}
	diffs, err := manpage.Sync("../../packaging/man/hostqosd", pages, manpage.Update())
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) > 0 && !manpage.Update() {
		t.Errorf("packaging/man/hostqosd differs from hostqosd's flags or docs/config.md; run make man and commit the result:\n%s", strings.Join(diffs, "\n"))
	}
}
