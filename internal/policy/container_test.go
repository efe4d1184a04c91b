package policy

import (
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
