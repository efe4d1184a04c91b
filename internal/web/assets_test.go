package web

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVendoredAssetsMatchLock: the vendored JavaScript is what
// scripts/web-assets.sh copies from the packages of ui/package-lock.json:
// vendor/SOURCES names each package at the lockfile's version and
// integrity, and each vendored file has the sha256 SOURCES records (a hand
// edit or a lockfile change without re-vendoring fails here; make test
// also rebuilds and diffs them with npm, scripts/web-assets.sh --check).
func TestVendoredAssetsMatchLock(t *testing.T) {
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	b, err := os.ReadFile("ui/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatalf("read ui/package-lock.json: %v", err)
	}
	f, err := os.Open("assets/vendor/SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{"SOURCES": true}
	pkgs := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		switch {
		case len(w) == 0 || strings.HasPrefix(w[0], "#"):
		case w[0] == "package" && len(w) == 4:
			pkgs++
			p, ok := lock.Packages["node_modules/"+w[1]]
			if !ok || p.Version != w[2] || p.Integrity != w[3] {
				t.Errorf("vendor/SOURCES has %s %s %s; the lockfile has %+v (run scripts/web-assets.sh)", w[1], w[2], w[3], p)
			}
		case w[0] == "file" && len(w) == 4:
			listed[w[1]] = true
			data, err := os.ReadFile(filepath.Join("assets/vendor", w[1]))
			if err != nil {
				t.Error(err)
				continue
			}
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != w[3] {
				t.Errorf("assets/vendor/%s is not the file of %s that SOURCES records (run scripts/web-assets.sh)", w[1], w[2])
			}
		default:
			t.Errorf("vendor/SOURCES: bad line %q", sc.Text())
		}
	}
	if pkgs == 0 {
		t.Error("vendor/SOURCES names no package")
	}
	ents, err := os.ReadDir("assets/vendor")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !listed[e.Name()] {
			t.Errorf("assets/vendor/%s is not listed in SOURCES", e.Name())
		}
	}
}

// TestPageIsSmall: what the page loads at start (index.html and every
// file it names) is under 300 kB, and it loads no script but its own
// files (the Content-Security-Policy allows nothing else: no inline
// script, no other origin).
func TestPageIsSmall(t *testing.T) {
	idx, err := os.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	total := len(idx)
	refs := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`).FindAllStringSubmatch(string(idx), -1)
	if len(refs) < 4 {
		t.Fatalf("index.html names %d assets: %v", len(refs), refs)
	}
	for _, m := range refs {
		b, err := os.ReadFile(strings.TrimPrefix(m[1], "/"))
		if err != nil {
			t.Errorf("index.html names %s: %v", m[1], err)
			continue
		}
		total += len(b)
	}
	t.Logf("initial load: %d bytes", total)
	if total >= 300_000 {
		t.Errorf("the page's initial load is %d bytes; keep it under 300 kB", total)
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]|style=|\son[a-z]+=`).Match(idx) {
		t.Error("index.html has inline script, style or event handlers, which the CSP refuses")
	}
}
