#!/usr/bin/env bash
# Builds the container image the container tests run, offline: a root file
# system holding Debian's busybox-static (as /bin/busybox, with /bin/sh and
# the applets the tests use linked to it) and the static programs given
# (copied to /bin/<name>), imported into Podman and/or Docker. No registry
# is contacted. The last line of its output is the image's tag.
#
#   scripts/container-image.sh [-t TAG] podman|docker|all [STATIC-BINARY...]
#
# TAG defaults to localhost/hostqos-test:<hash of the contents>, so tests
# wanting different contents never re-tag an image under each other.
# Idempotent: an image with that tag and contents is not imported again.
# Test images of other contents more than a day old are removed (unless a
# container uses them). "all" imports into each runtime that answers
# (Docker only if its daemon is running: see scripts/dockerd.sh).
set -euo pipefail

repo=localhost/hostqos-test
tag=
if [[ "${1:-}" == "-t" ]]; then
	tag=$2
	shift 2
fi
target=${1:-}
shift || true
case "$target" in
podman | docker | all) ;;
*)
	echo "usage: $0 [-t TAG] podman|docker|all [STATIC-BINARY...]" >&2
	exit 2
	;;
esac

busybox=/bin/busybox
[[ -x $busybox ]] || {
	echo "container-image: $busybox is missing (apt-get install busybox-static)" >&2
	exit 1
}
static() { # a program the image can run: no dynamic loader
	LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter' && return 1
	LC_ALL=C readelf -h "$1" >/dev/null 2>&1
}
static "$busybox" || {
	echo "container-image: $busybox is not a static executable (install busybox-static, not busybox)" >&2
	exit 1
}
for b in "$@"; do
	static "$b" || {
		echo "container-image: $b is not a static executable (build Go programs with CGO_ENABLED=0)" >&2
		exit 1
	}
done

hash=$(sha256sum "$busybox" "$@" | awk '{print $1}' | sha256sum | cut -c1-16)
tag=${tag:-$repo:$hash}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,etc,proc,sys,dev,tmp,run}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for a in sh ls cat sleep ip ping nc wget ps kill true echo; do
	ln -s busybox "$root/bin/$a"
done
for b in "$@"; do
	cp "$b" "$root/bin/$(basename "$b")"
done
echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$work/rootfs.tar" .

prune() { # runtime: old test images of other contents
	local rt=$1 cutoff
	cutoff=$(($(date +%s) - 86400))
	"$rt" images --format '{{.Repository}}:{{.Tag}} {{.ID}}' 2>/dev/null | while read -r t id; do
		[[ $t == "$repo:"* && $t != "$tag" ]] || continue
		created=$("$rt" image inspect --format '{{.Created.Unix}}' "$id" 2>/dev/null || echo "$cutoff")
		((created < cutoff)) && "$rt" rmi "$t" >/dev/null 2>&1 || true
	done
}

import() { # runtime
	local rt=$1 have
	# One import at a time per runtime (tests call this concurrently).
	exec 8>"/run/lock/hostqos-container-image.$rt.lock"
	flock 8
	have=$("$rt" image inspect --format '{{index .Config.Labels "hostqos.test.hash"}}' "$tag" 2>/dev/null || true)
	if [[ "$have" == "$hash" ]]; then
		echo "container-image: $rt already has $tag" >&2
		flock -u 8
		return
	fi
	local quiet=()
	[[ $rt == podman ]] && quiet=(--quiet) # no progress lines
	"$rt" import "${quiet[@]}" --change "LABEL hostqos.test.hash=$hash" --change 'CMD ["/bin/sh"]' \
		"$work/rootfs.tar" "$tag" >/dev/null
	echo "container-image: imported $tag into $rt" >&2
	prune "$rt"
	flock -u 8
}

case "$target" in
podman) import podman ;;
docker) import docker ;;
all)
	import podman
	if docker version >/dev/null 2>&1; then import docker; else echo "container-image: docker is not running, skipped" >&2; fi
	;;
esac
echo "$tag"
