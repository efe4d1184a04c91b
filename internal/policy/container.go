package policy

import (
	"path"
	"strings"
	"unicode"
)

// Container selectors. A rule's container selectors pick containers the
// daemon found on the host: by name (a glob, path.Match syntax) or id (12
// or more hex digits: the id's start, as `docker ps` shows it), by image
// (a glob over the image reference, e.g. docker.io/library/nginx:*) and by
// one label KEY=VALUE. All that are set must match. An image pattern may
// leave out the registry and path (postgres:*) and the tag (postgres).

// ContainerSelector is what a rule asks of a container.
type ContainerSelector struct {
	Name, Image string
	LabelKey    string
	LabelValue  string
	HasLabel    bool
}

// ContainerSelector returns the rule's container selectors.
func (r Rule) ContainerSelector() ContainerSelector {
	s := ContainerSelector{Name: r.Container, Image: r.Image}
	if r.ContainerLabel != "" {
		s.LabelKey, s.LabelValue, _ = strings.Cut(r.ContainerLabel, "=")
		s.HasLabel = true
	}
	return s
}

// minContainerID is the shortest id prefix a container selector matches
// ids by: what `docker ps` and `podman ps` show.
const minContainerID = 12

// isContainerID tells whether s is written as a container id (prefix).
func isContainerID(s string) bool {
	if len(s) < minContainerID || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !unicode.Is(unicode.ASCII_Hex_Digit, c) || unicode.IsUpper(c) {
			return false
		}
	}
	return true
}

// Matches tells whether a container with this id, name, image and labels
// is selected.
func (s ContainerSelector) Matches(id, name, image string, labels map[string]string) bool {
	if s.Name != "" {
		ok, _ := path.Match(s.Name, name)
		if !ok && !(isContainerID(s.Name) && strings.HasPrefix(id, s.Name)) {
			return false
		}
	}
	if s.Image != "" && !imageMatches(s.Image, image) {
		return false
	}
	if s.HasLabel {
		if v, ok := labels[s.LabelKey]; !ok || v != s.LabelValue {
			return false
		}
	}
	return true
}

// imageMatches tells whether an image reference matches pattern: the
// whole reference (docker.io/library/nginx:1.27), or its name without the
// registry and path (nginx:1.27); a pattern without a tag or digest also
// matches the reference without its own (nginx, docker.io/library/nginx).
// A * does not cross a /, as in path.Match.
func imageMatches(pattern, image string) bool {
	short := image[strings.LastIndexByte(image, '/')+1:]
	cands := []string{image, short}
	if !strings.ContainsAny(pattern, ":@") {
		cands = append(cands, untagged(image), untagged(short))
	}
	for _, c := range cands {
		if ok, _ := path.Match(pattern, c); ok {
			return true
		}
	}
	return false
}

// untagged is an image reference without its tag and digest.
func untagged(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

func (v *validator) containerSelectors(obj string, r Rule) {
	if r.HasContainerSelector() && (r.Cgroup != "" || r.Unit != "") {
		field, val := "container", r.Container
		if val == "" {
			field, val = "image", r.Image
		}
		if val == "" {
			field, val = "container_label", r.ContainerLabel
		}
		v.add(obj, field, val, "cannot be combined with cgroup or unit: a container is a cgroup of its own", "remove cgroup and unit, or put them in a rule of their own")
		return
	}
	if r.Container != "" {
		if _, err := path.Match(r.Container, ""); err != nil || strings.ContainsAny(r.Container, "\x00\n") {
			v.add(obj, "container", r.Container, "not a container name, id or glob", "e.g. web, web-*, or an id such as 3f4e5d6c7b8a")
		}
	}
	if r.Image != "" {
		if _, err := path.Match(r.Image, ""); err != nil || strings.ContainsAny(r.Image, "\x00\n") {
			v.add(obj, "image", r.Image, "not an image reference or glob", "e.g. docker.io/library/nginx:* or *postgres*")
		}
	}
	if r.ContainerLabel != "" {
		k, _, ok := strings.Cut(r.ContainerLabel, "=")
		if !ok || k == "" || strings.ContainsAny(r.ContainerLabel, "\x00\n") {
			v.add(obj, "container_label", r.ContainerLabel, "not KEY=VALUE", "e.g. tier=db (a label the container was started with)")
		}
	}
}
