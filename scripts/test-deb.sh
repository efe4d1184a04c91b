#!/usr/bin/env bash
# Installs hostqos on a Debian system of its own and checks where
# everything lands (as root; `make test-deb`, which .ci/run runs):
#
#   1. make install PREFIX=/usr DESTDIR=<a fresh chroot> changes nothing
#      outside DESTDIR (no group made on this host), and the installed unit
#      passes systemd-analyze verify inside the chroot;
#   2. make deb (lintian: no errors), then in another fresh chroot
#      dpkg -i: files where they belong, the group made, the unit verified,
#      --version, completion, libhostqos linkable; dpkg -r: nothing left
#      but the conffile; dpkg -P: nothing left at all.
#
# The chroot is Debian minbase of this host's release (plus systemd,
# procps, bash-completion and man-db: systemd-analyze verify looks up the
# unit's Documentation= pages with man), made once by debootstrap from the mirror apt
# uses and cached under $HOSTQOS_TEST_CACHE (default
# /var/cache/hostqos-test, outside the clone, so CI runs on the same
# machine reuse it); each run works on a copy and needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, chroot)"
for t in debootstrap chroot unshare dpkg-deb; do
	command -v "$t" >/dev/null || fail "$t missing; run scripts/install-deps.sh"
done

start=$SECONDS
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
include=systemd,procps,bash-completion,man-db
mirror=${HOSTQOS_DEBIAN_MIRROR:-}
if [[ -z "$mirror" ]]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 || true)
	mirror=${mirror:-http://deb.debian.org/debian}
fi
cache=${HOSTQOS_TEST_CACHE:-/var/cache/hostqos-test}
base=$cache/chroot-$suite-$arch-$(echo "$include" | tr , -)

# --- the cached chroot ---------------------------------------------------
if [[ ! -e "$base/.hostqos-complete" ]]; then
	echo "test-deb: making the chroot $base (debootstrap $suite from $mirror; once)"
	rm -rf "$base.new"
	mkdir -p "$cache"
	debootstrap --variant=minbase --include="$include" --arch="$arch" "$suite" "$base.new" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		fail "debootstrap failed; see $cache/debootstrap.log"
	rm -f "$base.new"/var/cache/apt/archives/*.deb
	touch "$base.new/.hostqos-complete"
	rm -rf "$base"
	mv "$base.new" "$base"
fi
echo "test-deb: chroot ready ($((SECONDS - start)) s)"

work=$(mktemp -d /var/tmp/hostqos-test-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

# fresh NAME: a copy of the cached chroot at $work/NAME.
fresh() {
	cp -a "$base" "$work/$1"
	echo "$work/$1"
}

# in ROOT CMD...: run CMD in the chroot, with /proc, in a mount namespace
# of its own so that nothing stays mounted after it.
inroot() {
	local root=$1
	shift
	unshare --mount --propagation private -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"
}

# tree ROOT: every path of the chroot but the ones dpkg, logs and caches
# change on their own.
tree() {
	(cd "$1" && find . \( -path ./proc -o -path ./tmp -o -path ./var/lib/dpkg -o -path ./var/log \
		-o -path ./var/cache/ldconfig -o -path ./var/cache/debconf -o -path ./var/cache/man -o -path ./run \) -prune -o -print | sort)
}

# --- 1. make install ----------------------------------------------------
t=$SECONDS
root=$(fresh install)
# Anything that would make a group or user on this host fails the test.
mkdir -p "$work/trap"
for c in groupadd useradd addgroup adduser systemd-sysusers; do
	printf '#!/bin/sh\necho "%s $*" >>%s/called\nexit 1\n' "$c" "$work" >"$work/trap/$c"
	chmod +x "$work/trap/$c"
done
groups_before=$(md5sum /etc/group)
PATH="$work/trap:$PATH" make --no-print-directory install PREFIX=/usr DESTDIR="$root" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log" >&2; fail "make install PREFIX=/usr DESTDIR=… failed"; }
[[ ! -e "$work/called" ]] || fail "make install DESTDIR=… ran $(cat "$work/called")"
[[ "$(md5sum /etc/group)" == "$groups_before" ]] || fail "make install DESTDIR=… changed this host's /etc/group"
! grep -q '^hostqos:' "$root/etc/group" || fail "make install DESTDIR=… made the group in DESTDIR"
unit=$root/etc/systemd/system/hostqosd.service
grep -qx 'ExecStart=/usr/sbin/hostqosd --config /etc/hostqos/hostqos.toml' "$unit" ||
	fail "make install PREFIX=/usr: $(grep ExecStart= "$unit")"
for f in usr/sbin/hostqosd usr/bin/hostqos usr/bin/hostqos-lab etc/sysusers.d/hostqos.conf etc/hostqos/hostqos.toml \
	usr/share/man/man8/hostqos.8 usr/share/man/man8/hostqosd.8 usr/share/man/man5/hostqos.toml.5 usr/share/man/man3/qsock.3 \
	usr/share/bash-completion/completions/hostqos usr/share/zsh/site-functions/_hostqos \
	usr/share/fish/vendor_completions.d/hostqos.fish usr/lib/libhostqos.so.1 usr/include/hostqos/qsock.h; do
	[[ -e "$root/$f" ]] || fail "make install PREFIX=/usr: no /$f"
done
inroot "$root" systemd-analyze verify /etc/systemd/system/hostqosd.service ||
	fail "systemd-analyze verify of the unit make install PREFIX=/usr installed"
inroot "$root" systemd-sysusers >/dev/null
inroot "$root" getent group hostqos >/dev/null || fail "systemd-sysusers made no group hostqos from /etc/sysusers.d/hostqos.conf"
echo "test-deb: make install PREFIX=/usr DESTDIR=… ok ($((SECONDS - t)) s)"
rm -rf "$root"

# --- 2. the package ----------------------------------------------------
t=$SECONDS
deb=$(scripts/build-deb.sh 2> >(tee "$work/lintian.log" >&2) | tail -1)
[[ -f "$deb" ]] || fail "make deb made no package"
version=$(dpkg-deb -f "$deb" Version)
echo "test-deb: built $deb with no lintian error ($((SECONDS - t)) s)"

t=$SECONDS
root=$(fresh deb)
tree "$root" >"$work/before"
cp "$deb" "$root/tmp/"
inroot "$root" dpkg -i "/tmp/$(basename "$deb")" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
for f in usr/sbin/hostqosd usr/bin/hostqos usr/bin/hostqos-lab lib/systemd/system/hostqosd.service \
	usr/lib/sysusers.d/hostqos.conf etc/hostqos/hostqos.toml \
	usr/share/man/man8/hostqos.8.gz usr/share/man/man8/hostqos-rule-add.8.gz usr/share/man/man8/hostqosd.8.gz \
	usr/share/man/man8/hostqos-lab.8.gz usr/share/man/man5/hostqos.toml.5.gz usr/share/man/man3/qsock.3.gz \
	usr/share/man/man3/qsend.3.gz usr/share/bash-completion/completions/hostqos \
	usr/share/zsh/vendor-completions/_hostqos usr/share/fish/vendor_completions.d/hostqos.fish \
	"usr/lib/$multiarch/libhostqos.so.1" "usr/lib/$multiarch/libhostqos.so" "usr/lib/$multiarch/libhostqos.a" \
	"usr/lib/$multiarch/pkgconfig/hostqos.pc" usr/include/hostqos/qsock.h \
	usr/share/doc/hostqos/copyright usr/share/doc/hostqos/changelog.gz; do
	[[ -e "$root/$f" ]] || fail "dpkg -i: no /$f"
done
[[ "$(inroot "$root" dpkg-query -W -f='${Conffiles}' hostqos | awk '{print $1}')" == /etc/hostqos/hostqos.toml ]] ||
	fail "/etc/hostqos/hostqos.toml is not the package's conffile"
inroot "$root" getent group hostqos >/dev/null || fail "dpkg -i: no group hostqos"
grep -qx 'ExecStart=/usr/sbin/hostqosd --config /etc/hostqos/hostqos.toml' "$root/lib/systemd/system/hostqosd.service" ||
	fail "the package's unit: $(grep ExecStart= "$root/lib/systemd/system/hostqosd.service")"
inroot "$root" systemd-analyze verify /lib/systemd/system/hostqosd.service || fail "systemd-analyze verify of the package's unit"
[[ "$(inroot "$root" hostqos --version)" == "hostqos $version" ]] || fail "hostqos --version: $(inroot "$root" hostqos --version)"
[[ "$(inroot "$root" hostqosd --version)" == "hostqosd $version" ]] || fail "hostqosd --version: $(inroot "$root" hostqosd --version)"
for page in hostqos hostqos-rule-add hostqosd hostqos-lab 5:hostqos.toml 3:qsock 3:qsend; do
	[[ "$page" == *:* ]] && set -- "${page%%:*}" "${page#*:}" || set -- "$page"
	inroot "$root" man -w "$@" >/dev/null 2>&1 || fail "man finds no page $page"
done
# (Output read whole: grep -q closing the pipe early would fail pipefail.)
grep -q "libhostqos.so.1 .*=> .*/lib/$multiarch/libhostqos.so.1" <<<"$(inroot "$root" ldconfig -p)" || fail "ldconfig does not know libhostqos.so.1"
# bash completes from the installed script, through the installed binary.
got=$(inroot "$root" bash -c '. /usr/share/bash-completion/bash_completion; . /usr/share/bash-completion/completions/hostqos
	COMP_WORDS=(hostqos rule a); COMP_CWORD=2; COMP_LINE="hostqos rule a"; COMP_POINT=${#COMP_LINE}
	__start_hostqos hostqos a rule 2>/dev/null; printf "%s\n" "${COMPREPLY[@]}"')
[[ "$got" == add ]] || fail "bash completion of 'hostqos rule a': $got"
# A program builds with pkg-config against the installed library and
# loads it in the chroot.
if command -v cc >/dev/null && command -v pkg-config >/dev/null; then
	flags=$(PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$root/usr/lib/$multiarch/pkgconfig" pkg-config --cflags --libs hostqos)
	printf '#include <hostqos/qsock.h>\n#include <stdio.h>\nint main(void){ puts(qstrerror()); return 0; }\n' >"$work/prog.c"
	cc -o "$root/tmp/prog" "$work/prog.c" $flags -Wl,-rpath-link,"$root/usr/lib/$multiarch" || fail "build against the package's libhostqos ($flags)"
	inroot "$root" /tmp/prog >/dev/null || fail "a program linked with libhostqos.so does not run in the chroot"
	grep -q "libhostqos.so.1 => .*/lib/$multiarch/libhostqos.so.1" <<<"$(inroot "$root" ldd /tmp/prog)" || fail "the program does not load the package's libhostqos.so.1"
	rm "$root/tmp/prog"
fi
echo "test-deb: dpkg -i ok ($((SECONDS - t)) s)"

# Removal: nothing of the package is left but its conffile (and the
# directory holding it); a purge leaves nothing. The group stays (Debian
# leaves system groups). The test's own files are gone from /tmp by then.
t=$SECONDS
rm -f "$root/tmp/$(basename "$deb")"
inroot "$root" dpkg -r hostqos >>"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -r"; }
[[ "$(inroot "$root" dpkg-query -W -f='${db:Status-Abbrev}' hostqos)" == "rc " ]] || fail "dpkg -r: not in state rc"
tree "$root" >"$work/removed"
extra=$(comm -13 "$work/before" "$work/removed" | grep -v -x -e ./etc/group- -e ./etc/gshadow- || true)
[[ "$extra" == $'./etc/hostqos\n./etc/hostqos/hostqos.toml' ]] || fail "dpkg -r left more than the conffile:"$'\n'"$extra"
inroot "$root" dpkg -P hostqos >>"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -P"; }
[[ -z "$(inroot "$root" dpkg-query -W -f='${db:Status-Abbrev}' hostqos 2>/dev/null)" ]] || fail "dpkg -P: the package is still known"
tree "$root" >"$work/purged"
extra=$(comm -13 "$work/before" "$work/purged" | grep -v -x -e ./etc/group- -e ./etc/gshadow- || true)
[[ -z "$extra" ]] || fail "dpkg -P left:"$'\n'"$extra"
missing=$(comm -23 "$work/before" "$work/purged")
[[ -z "$missing" ]] || fail "install and purge removed files that were there before:"$'\n'"$missing"
echo "test-deb: dpkg -r and dpkg -P ok ($((SECONDS - t)) s)"

warnings=$(grep -c '^W: ' "$work/lintian.log" || true)
echo "test-deb: ok: $(basename "$deb"), lintian: 0 errors, $warnings warnings; $((SECONDS - start)) s in all"
