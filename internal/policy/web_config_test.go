package policy

import (
	"os"
	"strings"
	"testing"
)

// TestWebTable: [web] listen turns the web view on, an address that is no
// HOST:PORT and an unknown key are refused with the line, and
// docs/config.md documents every key in its [web] section.
func TestWebTable(t *testing.T) {
	p, err := Load([]byte("[web]\nlisten = \"127.0.0.1:9465\"\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Web.Listen != "127.0.0.1:9465" {
		t.Errorf("[web] listen = %q", p.Web.Listen)
	}
	if p, err := Load(nil, "t.toml"); err != nil || p.Web.Listen != "" {
		t.Errorf("without [web]: %+v, %v", p.Web, err)
	}
	for conf, msg := range map[string]string{
		"[web]\nlisten = \"9465\"\n":             "t.toml:2",
		"[web]\nlisten = \"example.org:9465\"\n": "want HOST:PORT",
		"[web]\nlisten = \"127.0.0.1:70000\"\n":  "want HOST:PORT",
		"[web]\nlisten = 9465\n":                 "want HOST:PORT",
		"[web]\nport = 1\n":                      "port",
		"web = true\n":                           "want a table",
	} {
		if _, err := Load([]byte(conf), "t.toml"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Load(%q) = %v; want an error saying %q", conf, err, msg)
		}
	}
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := docSection(string(doc), "## `[web]`")
	for _, k := range webKeys {
		if !strings.Contains(sec, "| `"+k+"` |") {
			t.Errorf("docs/config.md, section [web]: no row for %s", k)
		}
	}
}
