#!/usr/bin/env bash
# Builds the Debian package of hostqos with dpkg-deb (no debhelper) into
# bin/: `make install` into a staging tree with Debian's paths, then what
# Debian policy adds (compressed manual pages and changelog, copyright,
# maintainer scripts, conffiles, md5sums, the ldconfig trigger), then
# lintian. docs/packaging.md says what is where.
#
#   scripts/build-deb.sh              bin/hostqos_VERSION_ARCH.deb, and lintian on it
#   LINTIAN=0 scripts/build-deb.sh    without lintian
#
# VERSION is the newest entry of packaging/debian/changelog; a build of any
# other commit than that release's tag (v1.0.0) is a snapshot,
# 1.0.0+git20261128.864c3ee after the tag, 1.0.0~git… before it, with an
# entry of its own on top of the installed changelog. It prints the path of
# the package on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for t in dpkg-deb dpkg-shlibdeps dpkg-architecture dpkg-buildflags; do
	command -v "$t" >/dev/null || need+=("$t")
done
if ((${#need[@]})); then
	echo "build-deb: missing ${need[*]}; run scripts/install-deps.sh" >&2
	exit 1
fi

changelog=packaging/debian/changelog
base=$(sed -n '1s/^hostqos (\([^)]*\)).*/\1/p' "$changelog")
[[ -n "$base" ]] || { echo "build-deb: $changelog: no version on its first line" >&2; exit 1; }
maint=$(sed -n 's/^ -- \(.*>\)  .*/\1/p;T;q' "$changelog")
version=$base
snapshot=""
if git rev-parse --git-dir >/dev/null 2>&1; then
	commit=$(git rev-parse --short HEAD)
	epoch=$(git show -s --format=%ct HEAD)
	if [[ "$(git describe --tags --exact-match HEAD 2>/dev/null)" != "v$base" ]] || ! git diff --quiet HEAD; then
		sep="~"
		git merge-base --is-ancestor "v$base" HEAD 2>/dev/null && sep="+"
		version="$base${sep}git$(date -u -d "@$epoch" +%Y%m%d).$commit"
		git diff --quiet HEAD || version+=".dirty"
		snapshot="$commit$(git diff --quiet HEAD || echo ' with uncommitted changes')"
	fi
else
	epoch=$(stat -c %Y "$changelog")
fi
export SOURCE_DATE_EPOCH=$epoch
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

out=bin
stage=$out/deb/hostqos
rm -rf "$out/deb"
mkdir -p "$stage/DEBIAN"

# The tree, as make install lays it out with Debian's paths. libhostqos
# is built anew with Debian's hardening flags (make install finds it
# made); the Go binaries are position-independent (as Debian builds
# executables, for address space randomisation), stripped (-s -w) and
# carry no build paths.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
make --no-print-directory -C libhostqos clean >/dev/null
CPPFLAGS="$(dpkg-buildflags --get CPPFLAGS)" CFLAGS="$(dpkg-buildflags --get CFLAGS)" LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
	make --no-print-directory -C libhostqos >/dev/null
GOFLAGS="${GOFLAGS:-} -trimpath -buildmode=pie" \
	make --no-print-directory install DESTDIR="$PWD/$stage" PREFIX=/usr VERSION="$version" EXTRA_LDFLAGS="-s -w" \
	UNITDIR=/lib/systemd/system SYSUSERSDIR=/usr/lib/sysusers.d ZSHCOMPDIR=/usr/share/zsh/vendor-completions \
	LIBDIR="/usr/lib/$multiarch" >/dev/null
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/usr/lib/$multiarch"/libhostqos.so.*.*
chmod 0644 "$stage/usr/lib/$multiarch"/libhostqos.so.*.*
strip --strip-debug --remove-section=.comment "$stage/usr/lib/$multiarch/libhostqos.a"

# Manual pages: compressed; a page that only sources another (.so) is a
# link to it, as dh_installman makes them.
find "$stage/usr/share/man" -type f -name '*.[0-9]' | while read -r page; do
	if target=$(sed -n '1s|^\.so man[0-9]/\(.*\)$|\1|p' "$page") && [[ -n "$target" ]] && [[ $(wc -l <"$page") -eq 1 ]]; then
		rm "$page"
		ln -s "$target.gz" "$page.gz"
	else
		gzip -9n "$page"
	fi
done

# Documentation: copyright (with the Go modules the binaries embed) and the
# changelog, and the README and docs the pages refer to.
doc=$stage/usr/share/doc/hostqos
install -d "$doc/docs"
{
	cat packaging/debian/copyright
	echo
	echo "Files: debian/go-modules"
	echo "Copyright: the authors of each module"
	echo "License: other"
	echo " The Go modules the binaries embed, each under the license in its source:"
	go version -m "$stage/usr/bin/hostqos" "$stage/usr/sbin/hostqosd" "$stage/usr/bin/hostqos-lab" |
		awk '$1 == "dep" { print " " $2 " " $3 }' | sort -u
} >"$doc/copyright"
{
	if [[ -n "$snapshot" ]]; then
		printf 'hostqos (%s) UNRELEASED; urgency=medium\n\n  * Snapshot of commit %s.\n\n -- %s  %s\n\n' \
			"$version" "$snapshot" "$maint" "$(date -u -R -d "@$epoch")"
	fi
	cat "$changelog"
} | gzip -9n >"$doc/changelog.gz"
gzip -9nc README.md >"$doc/README.md.gz"
for f in docs/*.md; do gzip -9nc "$f" >"$doc/docs/$(basename "$f").gz"; done
install -D -m 0644 packaging/debian/lintian-overrides "$stage/usr/share/lintian/overrides/hostqos"

# Control files.
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$stage/DEBIAN/"
echo /etc/hostqos/hostqos.toml >"$stage/DEBIAN/conffiles"
echo "activate-noawait ldconfig" >"$stage/DEBIAN/triggers"
soname=$(objdump -p "$stage/usr/lib/$multiarch"/libhostqos.so.*.* | awk '$1 == "SONAME" { print $2 }')
echo "libhostqos ${soname##*.so.} hostqos (>= $base~)" >"$stage/DEBIAN/shlibs"
shlibs=$(cd "$out/deb" && mkdir -p debian && printf 'Source: hostqos\n\nPackage: hostqos\nArchitecture: any\n' >debian/control &&
	dpkg-shlibdeps -O "hostqos/usr/lib/$multiarch"/libhostqos.so.*.* 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$out/deb/debian"
# /bin/kill: the unit's ExecReload.
depends="$shlibs, procps"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
	packaging/debian/control.in >"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/triggers" "$stage/DEBIAN/shlibs" "$stage/DEBIAN/md5sums"

# Reproducible: every file dated by the commit, owned by root.
find "$stage" -newermt "@$epoch" -print0 | xargs -0r touch --no-dereference --date="@$epoch"
deb=$out/hostqos_${version}_$arch.deb
rm -f "$out"/hostqos_*.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null

if [[ "${LINTIAN:-1}" != 0 ]]; then
	command -v lintian >/dev/null || { echo "build-deb: lintian missing; run scripts/install-deps.sh" >&2; exit 1; }
	# Errors fail the build; warnings and notes are shown.
	lintian --fail-on error --display-info "$deb" >&2
fi
echo "$deb"
