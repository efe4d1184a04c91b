// Package manpage makes hostqos's manual pages from what they describe —
// the commands' trees and flags, and the config reference (docs/config.md)
// — so that they cannot drift from it. `make man` writes them into
// packaging/man; each command's test fails when the committed pages differ
// from what this package makes (docs/packaging.md).
//
// Only tests import it: the binaries link no documentation generator.
package manpage

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Source and Manual are the page footer's and header's names.
const (
	Source = "hostqos"
	Manual = "hostqos Manual"
)

// UpdateEnv set to 1 makes the pages' tests write the pages instead of
// comparing them (`make man`).
const UpdateEnv = "HOSTQOS_UPDATE_MAN"

// Update reports whether the tests should write the pages.
func Update() bool { return os.Getenv(UpdateEnv) == "1" }

// changelogDate is the maintainer line that ends a Debian changelog entry.
var changelogDate = regexp.MustCompile(`(?m)^ -- [^<]*<[^>]*>  (.+)$`)

// Date is the date of the newest entry of the Debian changelog at path
// (packaging/debian/changelog): the pages carry the date of the release
// they describe, so making them twice gives the same bytes.
func Date(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	m := changelogDate.FindSubmatch(b)
	if m == nil {
		return time.Time{}, fmt.Errorf("read the date of %s: no maintainer line (\" -- NAME <EMAIL>  DATE\")", path)
	}
	t, err := time.Parse(time.RFC1123Z, string(m[1]))
	if err != nil {
		return time.Time{}, fmt.Errorf("read the date of %s: %w", path, err)
	}
	return t.UTC(), nil
}

// Tree makes one page per available command of root's tree, as cobra's
// generator names them (hostqos-rule-add.8), in section. seeAlso are more
// pages for the root's SEE ALSO ("hostqosd(8)"), after its commands'.
func Tree(root *cobra.Command, section string, date time.Time, seeAlso ...string) (map[string][]byte, error) {
	root.DisableAutoGenTag = true
	pages := map[string][]byte{}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		for _, s := range c.Commands() {
			if !s.IsAvailableCommand() || s.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := walk(s); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		d := date
		if err := doc.GenMan(c, &doc.GenManHeader{Section: section, Date: &d, Source: Source, Manual: Manual}, &b); err != nil {
			return fmt.Errorf("make the page of %s: %w", c.CommandPath(), err)
		}
		page := b.Bytes()
		if c == root && len(seeAlso) > 0 {
			if !bytes.Contains(page, []byte("\n.SH SEE ALSO\n")) {
				return fmt.Errorf("make the page of %s: no SEE ALSO section to add %v to", c.CommandPath(), seeAlso)
			}
			more := bytes.TrimRight(page, "\n")
			for _, p := range seeAlso {
				more = append(more, `, \fB`+p+`\fP`...)
			}
			page = append(more, '\n')
		}
		pages[strings.ReplaceAll(c.CommandPath(), " ", "-")+"."+section] = page
		return nil
	}
	return pages, walk(root)
}

// Markdown renders a page written in markdown (a "# NAME" section first)
// to roff, with the header every hostqos page has.
func Markdown(title, section string, date time.Time, md string) []byte {
	head := fmt.Sprintf("%% %q %q %q %q %q\n", title, section, date.Format("Jan 2006"), Source, Manual)
	return md2man.Render([]byte(head + md))
}

// Flags lists the flags of fs as a markdown definition list, in the order
// -h prints them: the flag and its value's name, then its usage and its
// default.
func Flags(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "**--%s**", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " *%s*", name)
		}
		b.WriteString("\n: " + escape(usage))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(&b, " (default: %s)", escape(f.DefValue))
		}
		b.WriteString("\n\n")
	})
	return b.String()
}

// escape keeps markdown from reading text as emphasis or markup.
func escape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "`", "\\`", "<", `\<`, "[", `\[`)
	return r.Replace(s)
}

// Sync compares the pages with the files of dir (the directory holds only
// these pages) or, with write, makes dir hold exactly them. It returns
// what differs: missing, changed and stale pages.
func Sync(dir string, pages map[string][]byte, write bool) ([]string, error) {
	names := make([]string, 0, len(pages))
	for n := range pages {
		names = append(names, n)
	}
	sort.Strings(names)
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	var diffs []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		old, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			diffs = append(diffs, n+": missing")
		case err != nil:
			return nil, err
		case !bytes.Equal(old, pages[n]):
			diffs = append(diffs, n+": differs")
		default:
			continue
		}
		if write {
			if err := os.WriteFile(p, pages[n], 0o644); err != nil {
				return nil, err
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if _, ok := pages[e.Name()]; ok {
			continue
		}
		diffs = append(diffs, e.Name()+": stale (no command makes it)")
		if write {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	return diffs, nil
}
