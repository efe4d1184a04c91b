#!/usr/bin/env bash
# Installs what building, testing and benchmarking hostqos needs on a fresh
# Debian/Ubuntu machine. Idempotent: installs only what is missing.
#   scripts/install-deps.sh          runtime/test/bench needs (iproute2, nsenter, nftables, bpftool,
#                                    btrfs-progs and e2fsprogs for the filesystem tests, systemd-analyze
#                                    for the service unit's test, prometheus for the metrics test,
#                                    tshark for the RSVP wire-format test, gcc/make/pkg-config for
#                                    libhostqos, python3 for the Python qsocket module, man-db for the
#                                    manual pages' test, dpkg-dev, lintian and debootstrap for make deb
#                                    and make test-deb, podman, runc, docker.io and busybox-static
#                                    for the container tests, etcd-server for the Kubernetes tests,
#                                    chromium for the web view's browser test)
#   scripts/install-deps.sh --bpf    also the BPF toolchain for `make generate` and `make fmt`: the
#                                    pinned clang-14 (internal/datapath/gen.go calls it by name),
#                                    so regenerated objects match the committed ones
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have ip || need+=(iproute2)
have tc || need+=(iproute2)
have nsenter || need+=(util-linux)
have nft || need+=(nftables)
have bpftool || need+=(bpftool)
have mkfs.btrfs || need+=(btrfs-progs) # exe-identity tests on a loop btrfs
have mkfs.ext4 || need+=(e2fsprogs)
have systemd-analyze || need+=(systemd) # rates packaging/hostqosd.service (cmd/hostqosd/unit_test.go)
have setpriv || need+=(util-linux)      # runs hostqosd with the unit's capabilities (tests/integration/unit_test.go)
have prometheus || need+=(prometheus) # the metrics test scrapes hostqosd with a real Prometheus
have tmux || need+=(tmux)               # hostqos top is tested inside a tmux pane
have tshark || need+=(tshark)           # decodes the RSVP messages of internal/rsvp's tests
have cc || need+=(gcc)                  # builds libhostqos and programs against it (tests/integration/qsock_test.go)
have make || need+=(make)
have pkg-config || need+=(pkg-config)   # the qsocket test compiles with `pkg-config --cflags --libs hostqos`
have python3 || need+=(python3)         # the Python qsocket module's test
have man || need+=(man-db)              # renders the manual pages (internal/manpage's test)
have dpkg-shlibdeps || need+=(dpkg-dev) # make deb (scripts/build-deb.sh)
have lintian || need+=(lintian)         # make deb checks the package
have debootstrap || need+=(debootstrap) # make test-deb's chroot (scripts/test-deb.sh)
# Real container runtimes for the container tests (internal/containers):
# Debian's Podman with runc (crun refuses hybrid cgroup layouts), Docker's
# engine (started by scripts/dockerd.sh), busybox-static for the image
# scripts/container-image.sh builds offline.
have podman || need+=(podman)
have runc || need+=(runc)
have dockerd || need+=(docker.io)
[[ -x /bin/busybox ]] && ! LC_ALL=C readelf -l /bin/busybox 2>/dev/null | grep -q interpreter || need+=(busybox-static)
# The Kubernetes tests' control plane (internal/kubetest): Debian's etcd
# (3.4) under a kube-apiserver that scripts/kube-apiserver.sh builds from
# the k8s.io/kubernetes module. The tests start their own etcd on free
# loopback ports; the package's own etcd service, where systemd starts
# it, is not used.
have etcd || need+=(etcd-server)
# The web view's browser test drives Debian's Chromium headless
# (tests/integration/web_test.go, through the DevTools protocol).
have chromium || need+=(chromium)
# The BPF compiler is pinned by name: the same clang gives byte-identical
# objects, which `make check-generated` compares with the committed ones.
# Change it together with -cc/-strip in internal/datapath/gen.go.
if [[ "${1:-}" == "--bpf" ]]; then
	have clang-14 || need+=(clang-14)
	have llvm-strip-14 || need+=(llvm-14)
	have clang-format || need+=(clang-format)
	[[ -e /usr/include/bpf/bpf_helpers.h ]] || need+=(libbpf-dev)
fi
have go || { echo "install-deps: Go is required (https://go.dev/dl); this script does not install toolchains" >&2; exit 1; }

if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing ${need[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "install-deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# tshark's package asks whether non-root users may capture; they may not.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
go mod download
