#!/usr/bin/env bash
# Builds a real kube-apiserver from the k8s.io/kubernetes Go module (the
# version pinned in scripts/kubetools/go.mod), for the tests that need a
# Kubernetes control plane (internal/kubetest), and caches it. Prints the
# binary's path on stdout; progress goes to stderr. Idempotent: when the
# binary is cached it prints the path at once. Safe to run twice at once
# (the second waits for the first).
#
#   scripts/kube-apiserver.sh            build (if needed) and print the path
#   scripts/kube-apiserver.sh --kubectl  also kubectl, for debugging a test's
#                                        control plane (printed second)
#
# The cache is ${XDG_CACHE_HOME:-~/.cache}/hostqos/kube-apiserver-VERSION.
# k8s.io/kubernetes cannot be built with `go install mod@version`: its
# go.mod replaces the staging modules (k8s.io/api, k8s.io/apiserver, …)
# with directories of its own repository. scripts/kubetools is a module of
# its own that requires k8s.io/kubernetes and replaces each of them with
# the published module of the same release (v0.X.Y for v1.X.Y); its go.sum
# pins every module. Go's ./... in the main module skips it (a directory
# with its own go.mod).
#
# The build runs at idle priority (nice 19, the idle I/O class, SCHED_IDLE):
# it takes only CPU nothing else wants, so beside other work it is slower
# but disturbs nothing. Cold, on 2 cores, it takes 5 to 9 minutes (about
# 2,000 packages), about 400 MB of module downloads and 1.2 GB of build
# cache; the binary is 120 MB (kubectl, 30 s more, 62 MB).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/scripts/kubetools
version=$(grep -oE '^(require )?[[:space:]]*k8s\.io/kubernetes v1\.[0-9]+\.[0-9]+$' "$mod/go.mod" | grep -oE 'v1\.[0-9]+\.[0-9]+$' || true)
[[ -n $version ]] || {
	echo "kube-apiserver.sh: no k8s.io/kubernetes requirement in $mod/go.mod" >&2
	exit 1
}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/hostqos
want=(kube-apiserver)
[[ ${1:-} == --kubectl ]] && want+=(kubectl)

cached() { [[ -x $cache/$1-$version ]]; }
all_cached() {
	local b
	for b in "${want[@]}"; do cached "$b" || return 1; done
}
print_paths() {
	local b
	for b in "${want[@]}"; do echo "$cache/$b-$version"; done
}
if all_cached; then
	print_paths
	exit 0
fi

command -v go >/dev/null || {
	echo "kube-apiserver.sh: Go is required (https://go.dev/dl)" >&2
	exit 1
}
mkdir -p "$cache"
exec 9>"$cache/kube-build.lock"
flock 9
if all_cached; then # built by a run we waited for
	print_paths
	exit 0
fi

idle=()
if nice -n 19 ionice -c 3 chrt --idle 0 true 2>/dev/null; then
	idle=(nice -n 19 ionice -c 3 chrt --idle 0)
fi
# The version the binary reports (kubectl version, /version), as the
# release's own build stamps it.
minor=${version#v1.}
minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

cd "$mod"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
start=$SECONDS
echo "kube-apiserver.sh: downloading the modules of k8s.io/kubernetes $version (once; into $(go env GOMODCACHE))" >&2
"${idle[@]}" go mod download
for b in "${want[@]}"; do
	cached "$b" && continue
	pkg=k8s.io/kubernetes/cmd/$b
	total=$(go list -deps "$pkg" | wc -l)
	echo "kube-apiserver.sh: building $b $version ($total packages; minutes, at idle priority)" >&2
	tmp=$(mktemp "$cache/.$b.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	# go build -v names each package as it compiles it: count them.
	if ! "${idle[@]}" go build -v -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg" 2>&1 |
		awk -v total="$total" -v b="$b" '
			/^[a-zA-Z0-9_.\/-]+$/ { if (++n % 200 == 0) printf "kube-apiserver.sh: %s: %d/%d packages compiled\n", b, n, total > "/dev/stderr"; next }
			{ print > "/dev/stderr" }'; then
		echo "kube-apiserver.sh: building $b failed" >&2
		exit 1
	fi
	chmod 0755 "$tmp"
	mv "$tmp" "$cache/$b-$version"
	trap - EXIT
	echo "kube-apiserver.sh: $b built in $((SECONDS - start)) s: $cache/$b-$version" >&2
done
print_paths
