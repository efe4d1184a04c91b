package policy

import (
	"os"
	"strings"
	"testing"
)

func TestContainerSelectorMatches(t *testing.T) {
	labels := map[string]string{"tier": "db", "env": "prod"}
	const id = "3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e"
	for _, c := range []struct {
		r    Rule
		want bool
	}{
		{Rule{Container: "db"}, true},
		{Rule{Container: "d*"}, true},
		{Rule{Container: "web"}, false},
		{Rule{Container: "3f4e5d6c7b8a"}, true},  // id prefix
		{Rule{Container: "3f4e5d6c7b8b"}, false}, // another id
		{Rule{Container: "3f4e5d"}, false},       // too short to be an id
		{Rule{Image: "docker.io/library/postgres:*"}, true},
		{Rule{Image: "*redis*"}, false},
		{Rule{Image: "postgres"}, true},
		{Rule{Image: "postgres:16"}, true},
		{Rule{Image: "postgres:15"}, false},
		{Rule{Image: "docker.io/library/postgres"}, true},
		{Rule{Image: "docker.io/*/postgres:16"}, true},
		{Rule{ContainerLabel: "tier=db"}, true},
		{Rule{ContainerLabel: "tier=web"}, false},
		{Rule{ContainerLabel: "tier="}, false},
		{Rule{Container: "db", Image: "*postgres*", ContainerLabel: "env=prod"}, true},
		{Rule{Container: "db", ContainerLabel: "env=dev"}, false},
	} {
		if got := c.r.ContainerSelector().Matches(id, "db", "docker.io/library/postgres:16", labels); got != c.want {
			t.Errorf("%+v: matches %v, want %v", c.r.ContainerSelector(), got, c.want)
		}
	}
}

func TestContainerSelectorValidation(t *testing.T) {
	for _, c := range []struct {
		r         Rule
		field, in string
	}{
		{Rule{Name: "r", Container: "web["}, "container", "not a container name"},
		{Rule{Name: "r", Image: "a[b"}, "image", "not an image reference"},
		{Rule{Name: "r", ContainerLabel: "nolabel"}, "container_label", "not KEY=VALUE"},
		{Rule{Name: "r", ContainerLabel: "=v"}, "container_label", "not KEY=VALUE"},
		{Rule{Name: "r", Container: "web", Cgroup: "/x"}, "container", "cannot be combined with cgroup"},
		{Rule{Name: "r", Image: "x", Unit: "a.service"}, "image", "cannot be combined with cgroup"},
		{Rule{Name: "r", Container: strings.Repeat("a", MaxContainerLen+1)}, "container", ""},
	} {
		p := &Policy{Classes: DefaultClasses(), Rules: []Rule{c.r}}
		err := p.Validate("test")
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("%+v: error %v, want one naming %s (%q)", c.r, err, c.field, c.in)
		}
	}
	ok := &Policy{Classes: DefaultClasses(), Rules: []Rule{{Name: "r", Container: "web-*", Image: "*nginx*", ContainerLabel: "tier=web", Class: "bulk"}}}
	if err := ok.Validate("test"); err != nil {
		t.Errorf("valid container rule refused: %v", err)
	}
	if !ok.Rules[0].HasAppSelector() {
		t.Error("a container selector is an app selector (it counts against the app rules)")
	}
}

// TestContainersTable: [containers] loads its keys strictly (a wrong
// type, a bad glob, a relative socket path and an unknown key are
// refused with the line), leaves the defaults when absent, and
// docs/config.md documents every key in its [containers] section.
func TestContainersTable(t *testing.T) {
	p, err := Load([]byte("[containers]\nenabled = false\nnetns = [\"ctr-*\", \"lab?\"]\ndocker_socket = \"-\"\npodman_socket = \"/run/user/0/podman/podman.sock\"\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerSettings{Disabled: true, Netns: []string{"ctr-*", "lab?"}, DockerSocket: "-", PodmanSocket: "/run/user/0/podman/podman.sock"}
	if c := p.Containers; c.Disabled != want.Disabled || strings.Join(c.Netns, " ") != "ctr-* lab?" || c.DockerSocket != want.DockerSocket || c.PodmanSocket != want.PodmanSocket {
		t.Errorf("[containers] = %+v, want %+v", c, want)
	}
	if p, err := Load([]byte("[[rule]]\nname = \"db\"\ncontainer = \"db\"\n"), "t.toml"); err != nil || p.Containers.Disabled || len(p.Containers.Netns) != 0 {
		t.Errorf("without [containers]: %+v, %v", p.Containers, err)
	}
	for conf, msg := range map[string]string{
		"[containers]\nenabled = \"yes\"\n":          "t.toml:2",
		"[containers]\nnetns = [\"a/b\"]\n":          "not a glob of a /run/netns name",
		"[containers]\ndocker_socket = \"d.sock\"\n": "want the absolute path of a Unix socket",
		"[containers]\ncri_socket = \"/run/x\"\n":    "cri_socket",
		"containers = 1\n":                           "want a table",
	} {
		if _, err := Load([]byte(conf), "t.toml"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Load(%q) = %v; want an error saying %q", conf, err, msg)
		}
	}
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := docSection(string(doc), "## `[containers]`")
	for _, k := range containersKeys {
		if !strings.Contains(sec, "| `"+k+"` |") {
			t.Errorf("docs/config.md, section [containers]: no row for %s", k)
		}
	}
}
