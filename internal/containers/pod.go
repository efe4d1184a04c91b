package containers

import (
	"path/filepath"
	"strings"
)

// PodUIDOf is the Kubernetes pod UID in a container's cgroup path as
// kubelet's cgroup drivers name pods: cgroupfs /kubepods/<qos>/pod<UID>/…
// and /kubepods/pod<UID>/… (guaranteed pods), systemd
// kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<UID with _ for
// ->.slice/… and kubepods-pod<UID>.slice. "" when the path holds none
// below a kubepods cgroup.
func PodUIDOf(path string) string {
	parts := strings.Split(filepath.ToSlash(path), "/")
	under := false
	for _, p := range parts {
		if p == "kubepods" || p == "kubepods.slice" {
			under = true
			continue
		}
		if !under {
			continue
		}
		if uid, ok := strings.CutPrefix(p, "pod"); ok && validUID(uid) {
			return uid
		}
		if s, ok := strings.CutSuffix(p, ".slice"); ok {
			if i := strings.LastIndex(s, "-pod"); i >= 0 && strings.HasPrefix(s, "kubepods-") {
				if uid := strings.ReplaceAll(s[i+len("-pod"):], "_", "-"); validUID(uid) {
					return uid
				}
			}
		}
	}
	return ""
}

// validUID tells whether s is written as a pod UID (a UUID, lower-case
// hex in the 8-4-4-4-12 form).
func validUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
