package containers

import "testing"

func TestPodUIDOf(t *testing.T) {
	const uid = "0b7c9a2e-5d41-4f3a-9e6b-1c2d3e4f5a6b"
	for path, want := range map[string]string{
		"/kubepods/besteffort/pod" + uid + "/libpod-abc":  uid,
		"/kubepods/pod" + uid + "/cri-containerd-x.scope": uid,
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c9a2e_5d41_4f3a_9e6b_1c2d3e4f5a6b.slice/cri-containerd-x.scope": uid,
		"/kubepods.slice/kubepods-pod0b7c9a2e_5d41_4f3a_9e6b_1c2d3e4f5a6b.slice/x":                                                         uid,
		"/sys/fs/cgroup/pids/kubepods/besteffort/pod" + uid + "/abc":                                                                       uid,
		"/docker/abc":                                        "",
		"/user.slice/pod" + uid + "/x":                       "", // not under kubepods
		"/kubepods/besteffort/podnot-a-uid/x":                "",
		"/kubepods/besteffort/pod" + uid[:35] + "/x":         "",
		"/kubepods.slice/kubepods-besteffort-podXYZ.slice/x": "",
	} {
		if got := PodUIDOf(path); got != want {
			t.Errorf("PodUIDOf(%q) = %q, want %q", path, got, want)
		}
	}
}
