package manpage

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var testDate = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// TestConfigTables: a table that fits a terminal stays a table, a wide
// one becomes one entry per row that keeps every cell, two tables side by
// side are set one above the other, links to other documents keep their
// text, and the Go API section is left out.
func TestConfigTables(t *testing.T) {
	ref := "# reference\n\nIntro, see [the rules](rules.md#x) and [a site](https://example.org/).\n\n" +
		"## `[[thing]]`\n\n" +
		"| field | type | default | meaning |\n|---|---|---|---|\n" +
		"| `speed` | rate | not set | how fast the thing goes when nothing else holds it back, in bits per second |\n\n" +
		"| name | value | | name | value |\n|---|---|-|---|---|\n| `A` | 1 | | `B` | 2 |\n| `C` | 3 | | | |\n\n" +
		"| k | v |\n|---|---|\n| `x` | 1 |\n\n" +
		"## Go API\n\nInternal.\n"
	page, err := Config([]byte(ref), testDate)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{
		".SH NAME\nhostqos.toml \\- ",
		".TP\n\\fBspeed\\fR (type: rate; default: not set)\nhow fast the thing goes",
		"Intro, see the rules and",
		"https://example.org/",
		".SH \\fB[[thing]]\\fR",
		"\\fBx\\fR\t1",
		"\\fBA\\fR\t1\n\\fBC\\fR\t3\n.TE",
		"\\fBB\\fR\t2\n.TE",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range []string{"Internal.", "rules.md", "GO API"} {
		if strings.Contains(s, bad) {
			t.Errorf("page has %q:\n%s", bad, s)
		}
	}
}

// TestConfigKeepsEveryRow: every row of every table of docs/config.md (the
// part the page takes) is in hostqos.toml(5), so the conversion drops no
// field, setting or unit.
func TestConfigKeepsEveryRow(t *testing.T) {
	ref, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	page, err := Config(ref, testDate)
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(ref), configEnd)
	plain := roffPlain(string(page))
	rows := 0
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		// Body rows: a wide table's headings name its columns instead.
		if !isTableRow(l) || strings.Trim(l, "|-: ") == "" || i+1 < len(lines) && isTableRow(lines[i+1]) && strings.Trim(lines[i+1], "|-: ") == "" {
			continue
		}
		for _, c := range cells(l) {
			want := mdPlain(c)
			if want == "" {
				continue
			}
			rows++
			if !strings.Contains(plain, want) {
				t.Errorf("hostqos.toml(5) lacks the cell %q of docs/config.md's row %s", want, l)
			}
		}
	}
	if rows < 100 {
		t.Fatalf("only %d table cells found in docs/config.md", rows)
	}
}

// mdPlain and roffPlain reduce both texts to their words, so a cell can
// be found in the page whatever markup either has.
func mdPlain(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	parts := strings.Split(s, "`")
	for i := 0; i < len(parts); i += 2 { // emphasis, outside code spans
		parts[i] = strings.ReplaceAll(parts[i], "*", "")
	}
	s = strings.ReplaceAll(strings.Join(parts, ""), "\\|", "|")
	return strings.Join(strings.Fields(s), " ")
}

var roffEsc = regexp.MustCompile(`\\f[BIRP]|\\&|\\e`)

func roffPlain(s string) string {
	s = roffEsc.ReplaceAllString(s, "")
	s = strings.NewReplacer(`\-`, "-", `\(aq`, "'", "\nT{\n", " ", "\nT}", " ", "\t", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// TestPagesRender runs every committed page through man as lintian does
// (warnings on, UTF-8) but at 80 columns, in a manual's layout so that
// .so pages find their target, and checks that the NAME line is one
// apropos can read (lexgrog): a page the package ships must show cleanly.
func TestPagesRender(t *testing.T) {
	man, err := exec.LookPath("man")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("man not found; run scripts/install-deps.sh (it installs man-db)")
		}
		t.Skip("man not found (scripts/install-deps.sh installs man-db)")
	}
	pages, err := filepath.Glob("../../packaging/man/*/*.[58]")
	if err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Glob("../../libhostqos/man/*.3")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, lib...)
	if len(pages) < 20 {
		t.Fatalf("only %d pages found", len(pages))
	}
	root := t.TempDir()
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "man"+p[len(p)-1:])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lexgrog, _ := exec.LookPath("lexgrog")
	for _, p := range pages {
		rel := filepath.Join("man"+p[len(p)-1:], filepath.Base(p))
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", rel)
		cmd.Dir = root
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C.UTF-8", "MANROFFSEQ=", "MANWIDTH=80"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man --warnings %s: %v\n%s", p, err, stderr.String())
		}
		if lexgrog == "" {
			continue
		}
		out, err := exec.Command(lexgrog, filepath.Join(root, rel)).CombinedOutput()
		if err != nil {
			t.Errorf("lexgrog %s: %v\n%s", p, err, out)
		}
	}
}
