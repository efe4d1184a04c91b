package manpage

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// configEnd is the first section of docs/config.md that is not for the
// page: the Go API is the developers', not the administrator's.
const configEnd = "## Go API"

// Config makes hostqos.toml(5) from the config reference (docs/config.md,
// the text TestEveryFieldLoads holds to the policy's fields): its sections
// become the page's, its field tables definition lists (a man page is
// narrower than a table of meanings), its links to other documents the
// documents' names (the package ships them in /usr/share/doc/hostqos).
func Config(reference []byte, date time.Time) ([]byte, error) {
	doc := string(reference)
	if i := strings.Index(doc, configEnd); i >= 0 {
		doc = doc[:i]
	}
	title, rest, ok := strings.Cut(doc, "\n")
	if !strings.HasPrefix(title, "# ") || !ok {
		return nil, fmt.Errorf("make hostqos.toml(5): the config reference does not start with a \"# \" title")
	}
	var b strings.Builder
	b.WriteString("# NAME\nhostqos.toml - the hostqos policy: links, classes, rules, reservations, blocks and the daemon's settings\n\n")
	b.WriteString("# SYNOPSIS\n**/etc/hostqos/hostqos.toml**\n\n")
	b.WriteString("# DESCRIPTION\n")
	lines := strings.Split(rest, "\n")
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		switch {
		case fenced || strings.HasPrefix(l, "```"):
			b.WriteString(l + "\n")
		case strings.HasPrefix(l, "## "):
			b.WriteString("# " + upperOutsideCode(l[3:]) + "\n")
		case strings.HasPrefix(l, "### "):
			b.WriteString("## " + l[4:] + "\n")
		case isTableRow(l):
			j := i
			for j < len(lines) && isTableRow(lines[j]) {
				j++
			}
			b.WriteString(table(lines[i:j]))
			i = j - 1
		default:
			b.WriteString(unlink(l) + "\n")
		}
	}
	b.WriteString("# FILES\n")
	b.WriteString("**/etc/hostqos/hostqos.toml**\n: the policy file hostqosd reads at start, on **hostqos reload** and on SIGHUP\n\n")
	b.WriteString("**/var/lib/hostqos/state.json**\n: changes made with the CLI or the API, layered over the file\n\n")
	b.WriteString("**/run/hostqos/runtime.json**\n: **--temporary** changes, kept until the daemon stops\n\n")
	b.WriteString("# SEE ALSO\n**hostqos**(8), **hostqosd**(8), **hostqos-config-check**(8), **hostqos-reload**(8); the documents in /usr/share/doc/hostqos\n")
	page := Markdown("HOSTQOS.TOML", "5", date, b.String())
	// An example after a definition list starts at the section's margin,
	// not indented as if it were the last definition's.
	return bytes.ReplaceAll(page, []byte("\n\n.EX\n"), []byte("\n\n.PP\n.EX\n")), nil
}

// upperOutsideCode upper-cases a heading, as man pages write them, but
// not its code spans (`[[link]]` stays a key).
func upperOutsideCode(s string) string {
	parts := strings.Split(s, "`")
	for i := 0; i < len(parts); i += 2 {
		parts[i] = strings.ToUpper(parts[i])
	}
	return strings.Join(parts, "`")
}

// mdLink is a markdown link to another document of docs/.
var mdLink = regexp.MustCompile(`\[([^\]]+)\]\(([^)\s]+)\)`)

// unlink replaces links to the other documents by their text.
func unlink(l string) string {
	return mdLink.ReplaceAllStringFunc(l, func(m string) string {
		sub := mdLink.FindStringSubmatch(m)
		if strings.HasPrefix(sub[2], "http://") || strings.HasPrefix(sub[2], "https://") {
			return m
		}
		return sub[1]
	})
}

// row is a table row of cells.
func row(c []string) string { return "| " + strings.Join(c, " | ") + " |" }

func isTableRow(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "|") }

// cells splits a table row into its cells, "|" inside code spans kept.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var out []string
	var cur strings.Builder
	code := false
	for _, r := range row {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// tableWidth is the widest a table may be and stay a table: what fits an
// 80-column terminal after the page's indent.
const tableWidth = 64

// table renders a markdown table: narrow ones as they are (tbl), wide
// ones as a definition list, one entry per row: the first cell, the
// middle ones named by their headings, then the last one.
func table(rows []string) string {
	if len(rows) < 2 {
		return strings.Join(rows, "\n") + "\n"
	}
	head := cells(rows[0])
	// A heading with an empty cell sets two tables side by side (the
	// DSCP names): one above the other fits a page.
	for k, h := range head {
		if h == "" && k > 0 {
			var left, right []string
			for _, r := range rows {
				c := cells(r)
				left = append(left, row(c[:min(k, len(c))]))
				if len(c) > k+1 && strings.Trim(strings.Join(c[k+1:], ""), "-: ") != "" || r == rows[1] {
					right = append(right, row(c[min(k+1, len(c)):]))
				}
			}
			return table(left) + "\n" + table(right)
		}
	}
	body := rows[2:]
	widths := make([]int, len(head))
	for _, r := range append([]string{rows[0]}, body...) {
		for i, c := range cells(r) {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	total := 3 * len(widths)
	for _, w := range widths {
		total += w
	}
	if total <= tableWidth {
		var b strings.Builder
		for _, r := range rows {
			b.WriteString(unlink(r) + "\n")
		}
		return b.String()
	}
	var b strings.Builder
	for _, r := range body {
		c := cells(r)
		if len(c) == 0 {
			continue
		}
		b.WriteString(unlink(c[0]))
		var mid []string
		for i := 1; i < len(c)-1 && i < len(head); i++ {
			if c[i] != "" {
				mid = append(mid, head[i]+": "+unlink(c[i]))
			}
		}
		if len(mid) > 0 {
			b.WriteString(" (" + strings.Join(mid, "; ") + ")")
		}
		b.WriteString("\n")
		if len(c) > 1 {
			b.WriteString(": " + unlink(c[len(c)-1]) + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}
