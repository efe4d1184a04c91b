package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// walk calls fn for every command of the tree.
func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		if !s.Hidden && s.Name() != "help" && s.Name() != "completion" {
			walk(s, fn)
		}
	}
}

// TestCLIReferenceCoversEveryCommand keeps docs/cli.md true: every command
// path and every flag of the CLI must appear in it.
func TestCLIReferenceCoversEveryCommand(t *testing.T) {
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	walk(newRootCmd(newFactory(ioStreams{})), func(c *cobra.Command) {
		path := c.CommandPath()
		if !strings.Contains(doc, "`"+path) && !strings.Contains(doc, "## "+path) {
			t.Errorf("docs/cli.md does not document %q", path)
		}
		if c.Parent() != nil && c.Parent().Name() == "tool" {
			return // the tools have their own reference, docs/tools.md
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if !strings.Contains(doc, "--"+f.Name) {
				t.Errorf("docs/cli.md does not mention flag --%s of %q", f.Name, path)
			}
		})
	})
}

// conventions is the "Conventions" section of docs/cli.md.
func conventions(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "\n## Conventions\n")
	if i < 0 {
		t.Fatal("docs/cli.md has no Conventions section")
	}
	sec := doc[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	return sec
}

// subsection is the part of sec under "### title".
func subsection(t *testing.T, sec, title string) string {
	t.Helper()
	i := strings.Index(sec, "\n### "+title+"\n")
	if i < 0 {
		t.Fatalf("Conventions has no %q", title)
	}
	s := sec[i+1:]
	if j := strings.Index(s[4:], "\n### "); j >= 0 {
		s = s[:j+4]
	}
	return s
}

// tableRows are the cells of the body rows of the markdown tables in s.
func tableRows(s string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) > 0 {
		rows = rows[1:] // the header
	}
	return rows
}

// quoted are the `…` values of a cell.
func quoted(cell string) []string {
	var out []string
	for {
		i := strings.Index(cell, "`")
		if i < 0 {
			return out
		}
		j := strings.Index(cell[i+1:], "`")
		if j < 0 {
			return out
		}
		out = append(out, cell[i+1:i+1+j])
		cell = cell[i+2+j:]
	}
}

// TestConventionsTables: the duration and unit examples of docs/cli.md
// read as the table says, and its exit codes are the CLI's.
func TestConventionsTables(t *testing.T) {
	sec := conventions(t)
	for _, r := range tableRows(subsection(t, sec, "Durations")) {
		want, err := time.ParseDuration(quoted(r[1])[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range quoted(r[0]) {
			if d, err := policy.ParseDuration(v); err != nil || d != want {
				t.Errorf("durations: %q reads as %v, %v; docs/cli.md says %v", v, d, err, want)
			}
		}
	}
	units := tableRows(subsection(t, sec, "Units"))
	if len(units) == 0 {
		t.Fatal("no units table")
	}
	for _, r := range units {
		for _, v := range quoted(r[0]) {
			_, rerr := policy.ParseRate(v)
			_, serr := policy.ParseSize(v)
			switch {
			case strings.HasPrefix(r[1], "rate "):
				if x, err := policy.ParseRate(v); err != nil || x.String() != quoted(r[1])[0] {
					t.Errorf("units: %q reads as %v, %v; docs/cli.md says %s", v, x, err, r[1])
				}
			case strings.HasPrefix(r[1], "size "):
				want, _ := strconv.ParseUint(strings.Fields(r[1])[1], 10, 64)
				if x, err := policy.ParseSize(v); err != nil || uint64(x) != want {
					t.Errorf("units: %q reads as %d, %v; docs/cli.md says %s", v, x, err, r[1])
				}
			case r[1] == "refused as a rate":
				if rerr == nil {
					t.Errorf("units: rate %q is taken; docs/cli.md says refused", v)
				}
			case r[1] == "refused as a size":
				if serr == nil {
					t.Errorf("units: size %q is taken; docs/cli.md says refused", v)
				}
			default:
				t.Errorf("units: row %q: unknown meaning", r)
			}
		}
	}
	rows := tableRows(subsection(t, sec, "Exit codes"))
	if len(rows) != len(exitCodes) {
		t.Fatalf("docs/cli.md lists %d exit codes, the CLI has %d", len(rows), len(exitCodes))
	}
	for i, r := range rows {
		if c := exitCodes[i]; r[0] != strconv.Itoa(int(c.code)) || r[1] != c.name {
			t.Errorf("exit code row %q, the CLI's: %d %s", r, c.code, c.name)
		}
	}
}

// TestConventionsExamples runs the `$ hostqos …` examples of docs/cli.md's
// Conventions over the fake client and compares what they print (and
// `echo $?`) with what the section shows.
func TestConventionsExamples(t *testing.T) {
	sec := conventions(t)
	n := 0
	for _, block := range strings.Split(sec, "```\n")[1:] {
		if !strings.HasPrefix(block, "$ ") {
			continue
		}
		block = strings.TrimSuffix(block[:strings.LastIndex(block, "\n")+1], "")
		var code exitCode
		for _, cmd := range strings.Split(block, "$ ")[1:] {
			line, want, _ := strings.Cut(cmd, "\n")
			if line == "echo $?" {
				if strings.TrimSpace(want) != strconv.Itoa(int(code)) {
					t.Errorf("exit code %d, docs/cli.md says %s", code, want)
				}
				continue
			}
			args := strings.Fields(line)
			if args[0] != "hostqos" {
				t.Fatalf("example %q", line)
			}
			out, errOut, c := runFake(&fakeClient{}, args[1:]...)
			code = c
			if got := out + errOut; got != want {
				t.Errorf("%s\nprints\n%s\ndocs/cli.md shows\n%s", line, got, want)
			}
			n++
		}
	}
	if n < 5 {
		t.Errorf("only %d examples found", n)
	}
}

// TestREADMESteamRule: the README's Steam rule names the Steam client's
// binary in a native install (~/.local/share/Steam: the client in
// ubuntu12_32, its web helper in ubuntu12_64, the launcher script, the
// library and logs), and nothing that is not a file.
func TestREADMESteamRule(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var pattern string
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "hostqos rule add steam --exe '"); ok {
			pattern, _, _ = strings.Cut(rest, "'")
		}
	}
	if !strings.HasPrefix(pattern, "/home/*/") {
		t.Fatalf("README: no rule add steam --exe '/home/*/…' (found %q)", pattern)
	}
	root := t.TempDir()
	steam := filepath.Join(root, "home/alice/.local/share/Steam")
	for _, f := range []string{"steam.sh", "ubuntu12_32/steam", "ubuntu12_32/steam-runtime/run.sh", "ubuntu12_64/steamwebhelper",
		"steamapps/common/Game/game.x86_64", "logs/content_log.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(steam, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(steam, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(steam, "ubuntu12_32/steam"); len(got) != 1 || got[0] != want {
		t.Errorf("README's steam rule %s matches %v in a Steam install; want only the client, %s", pattern, got, want)
	}
}

// docNumbers are the whole numbers of a line of prose (1,024 and 1024
// alike), versions (5.17) and decimals left out.
func docNumbers(line string) []int {
	var out []int
	for _, m := range regexp.MustCompile(`\d[\d,]*(\.\d+)?`).FindAllString(line, -1) {
		m = strings.TrimRight(m, ",")
		if strings.Contains(m, ".") {
			continue
		}
		if n, err := strconv.Atoi(strings.ReplaceAll(m, ",", "")); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// TestDocsStateTheRuleLimits: every line of the docs that speaks of rules
// with app selectors quotes the datapath's limits (policy.MaxRules,
// MaxAppRules, BoundedFlowRules, BoundedAppRules; one more in an example
// of going past one; half the app rules for --max-user-runs) and no
// other count of rules, and docs/security.md's table of bounds states
// them.
func TestDocsStateTheRuleLimits(t *testing.T) {
	allowed := map[int]bool{429: true} // HTTP 429, beside the runs' bounds
	for _, n := range []int{policy.MaxRules, policy.MaxAppRules, policy.BoundedFlowRules, policy.BoundedAppRules} {
		allowed[n], allowed[n+1] = true, true
	}
	maxUserRuns := policy.MaxAppRules / 2 // hostqosd --max-user-runs: at most half the app slots
	allowed[maxUserRuns] = true
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(data), "\n") {
			if !regexp.MustCompile(`(?i)app[- ]selector`).MatchString(l) {
				continue
			}
			for _, n := range docNumbers(l) {
				if n >= 100 && !allowed[n] {
					t.Errorf("%s:%d: %d beside app selectors is none of the datapath's rule limits (%d rules, %d with app selectors; bounded %d and %d):\n%s",
						filepath.Base(file), i+1, n, policy.MaxRules, policy.MaxAppRules, policy.BoundedFlowRules, policy.BoundedAppRules, l)
				}
			}
		}
	}
	data, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		row  string
		want []int
	}{
		{"| app-selector rules", []int{policy.MaxAppRules, policy.BoundedAppRules}},
		{"| `hostqos run`s of all ordinary users", []int{maxUserRuns}},
	} {
		found := false
		for _, l := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(l, c.row) {
				continue
			}
			found = true
			for _, n := range c.want {
				if !slices.Contains(docNumbers(l), n) {
					t.Errorf("docs/security.md: row %q does not say %d:\n%s", c.row, n, l)
				}
			}
		}
		if !found {
			t.Errorf("docs/security.md has no row %q", c.row)
		}
	}
}

// TestToolsDocNamesTheAPI: the names docs/tools.md lists under "Go API
// (internal/traffic)" (its first paragraph) are package traffic's, and the
// functions it names as internal/policy's are package policy's.
func TestToolsDocNamesTheAPI(t *testing.T) {
	data, err := os.ReadFile("../../docs/tools.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "### Go API (internal/traffic)\n\n")
	if i < 0 {
		t.Fatal(`docs/tools.md has no "### Go API (internal/traffic)"`)
	}
	sec := doc[i:]
	sec = sec[:strings.Index(sec, "\n## ")]
	name := regexp.MustCompile("`([A-Z][A-Za-z]*(\\.[A-Z][A-Za-z]*)?)(\\(\\))?`")
	traffic, policy := exported(t, "../../internal/traffic"), exported(t, "../../internal/policy")
	list := strings.Split(sec, "\n\n")[1]
	for _, m := range name.FindAllStringSubmatch(list, -1) {
		method := m[3] != "" || strings.Contains(list, m[0]+" method") // `Validate()`, a `WriteTable` method
		if method && !traffic["."+m[1]] || !method && !traffic[m[1]] {
			t.Errorf("docs/tools.md lists %s, which package traffic does not have", m[0])
		}
	}
	n := 0
	for _, ps := range regexp.MustCompile("`internal/policy` \\(([^)]*)\\)").FindAllStringSubmatch(sec, -1) {
		for _, m := range name.FindAllStringSubmatch(ps[1], -1) {
			n++
			if !policy[m[1]] {
				t.Errorf("docs/tools.md names %s as internal/policy's, which package policy does not have", m[0])
			}
		}
	}
	if n == 0 {
		t.Error("docs/tools.md names no parser of internal/policy")
	}
}

// exported are the top-level names of the package in dir (its non-test
// files): functions, types, values, and methods as Type.Method.
func exported(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if st, ok := typ.(*ast.StarExpr); ok {
					typ = st.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
					names["."+d.Name.Name] = true // a method some type has
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						names[sp.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no names in %s", dir)
	}
	return names
}

// TestDocsNameNoIssues: the docs say what is, not which issue was to do
// it: a reference to an issue ("issue 10 part b had not landed") goes
// stale the day it lands, unnoticed (docs/ddos.md said the receive side
// ignored a protected client's class long after it did not).
func TestDocsNameNoIssues(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../python/README.md")
	re := regexp.MustCompile(`(?i)\bissue\s*#?\d+`)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(data), "\n") {
			if m := re.FindString(l); m != "" {
				t.Errorf("%s:%d names %q: say what the code does instead:\n%s", filepath.Base(file), i+1, m, l)
			}
		}
	}
}

// TestContainersDocExamples keeps docs/containers.md true: its commands
// parse (against a fake daemon), its config file example loads, and the
// `container list` it shows is what the CLI prints for those containers.
func TestContainersDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(\\w*)\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	ctrs := []api.Container{
		{Runtime: "docker", ID: "3f4e5d6c7b8a9f0e1d2c3b4a", Name: "db", Image: "docker.io/library/postgres:16", Labels: map[string]string{"tier": "db"},
			Veths: []string{"veth5e1b7c0"}, Rules: []string{"db"}, Seen: true},
		{Runtime: "docker", ID: "a1b2c3d4e5f6a7b8c9d0e1f2", Name: "metrics", Image: "docker.io/prom/node-exporter:v1.8.2",
			Cgroup: "/system.slice/docker-a1b2c3d4e5f6.scope", HostNetwork: true, Seen: true},
		{Runtime: "podman", ID: "77aa88bb99cc00dd11ee22ff", Name: "web", Image: "docker.io/library/nginx:1.27", Labels: map[string]string{"tier": "web"},
			Veths: []string{"veth3a9c51d"}, Rules: []string{"web"}, Seen: true},
	}
	commands, tables, configs := 0, 0, 0
	for _, b := range blocks {
		lang, text := b[1], b[2]
		switch {
		case lang == "sh":
			for _, line := range strings.Split(text, "\n") {
				if !strings.HasPrefix(line, "hostqos ") {
					continue
				}
				var args []string
				for i, part := range strings.Split(line, "'") { // 'quoted' words have no spaces here
					if i%2 == 1 {
						args = append(args, part)
					} else {
						args = append(args, strings.Fields(part)...)
					}
				}
				out, errOut, code := runFake(&fakeClient{ctrs: ctrs}, args[1:]...)
				if code != exitOK {
					t.Errorf("docs/containers.md: %s: exit %d: %s%s", line, code, out, errOut)
				}
				commands++
			}
		case lang == "toml":
			if _, err := policy.Load([]byte(text), "docs/containers.md"); err != nil {
				t.Errorf("docs/containers.md config example: %v\n%s", err, text)
			}
			configs++
		case strings.HasPrefix(text, "RUNTIME "):
			var buf strings.Builder
			printContainers(&buf, ctrs)
			if buf.String() != text {
				t.Errorf("docs/containers.md shows\n%s\nhostqos container list prints\n%s", text, buf.String())
			}
			tables++
		}
	}
	if commands < 6 || configs != 1 || tables != 1 {
		t.Errorf("docs/containers.md: %d commands, %d config examples, %d container lists checked", commands, configs, tables)
	}
}
