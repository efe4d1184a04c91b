#!/usr/bin/env bash
# Vendors the web view's JavaScript dependencies (internal/web/ui/
# package.json and its package-lock.json) into internal/web/assets/vendor,
# which go:embed serves: a plain `go build` needs no Node. The files are
# copied unchanged from the packages npm installs from the lockfile, and
# vendor/SOURCES records each package's version and integrity (from the
# lockfile) and each copied file's sha256; internal/web's
# TestVendoredAssetsMatchLock checks those against the lockfile and the
# committed files.
#   scripts/web-assets.sh          install from the lockfile and copy (commit the result)
#   scripts/web-assets.sh --check  install into a scratch dir and fail when the
#                                  committed files differ (make test runs it);
#                                  skips without npm
set -euo pipefail
cd "$(dirname "$0")/.."
ui=internal/web/ui
vendor=internal/web/assets/vendor
check=false
[[ "${1:-}" == "--check" ]] && check=true

if ! command -v npm >/dev/null 2>&1; then
	if $check; then
		echo "web-assets: npm is not installed; skipping the rebuild-and-diff of $vendor (TestVendoredAssetsMatchLock still checks it against the lockfile)"
		exit 0
	fi
	echo "web-assets: npm is required to vendor the web view's JavaScript" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$ui/package.json" "$ui/package-lock.json" "$work/"
# --prefer-offline: npm's cache serves what it holds; the registry the rest.
if ! (cd "$work" && npm ci --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
	if $check && grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|network' "$work/npm.log"; then
		echo "web-assets: the npm registry is unreachable and npm's cache lacks the packages; skipping the rebuild-and-diff of $vendor (TestVendoredAssetsMatchLock still checks it against the lockfile)"
		exit 0
	fi
	cat "$work/npm.log" >&2
	echo "web-assets: npm ci from internal/web/ui/package-lock.json failed" >&2
	exit 1
fi

# The files of each package the page loads: package, file in the package, name in vendor/.
files=(
	"uplot dist/uPlot.iife.min.js uPlot.iife.min.js"
	"uplot dist/uPlot.min.css uPlot.min.css"
	"uplot LICENSE uPlot.LICENSE"
)
out="$work/out"
mkdir -p "$out"
{
	echo "# made by scripts/web-assets.sh from internal/web/ui/package-lock.json; do not edit"
	for pkg in $(printf '%s\n' "${files[@]}" | cut -d' ' -f1 | sort -u); do
		ver=$(node -p "require('$work/package-lock.json').packages['node_modules/$pkg'].version")
		integ=$(node -p "require('$work/package-lock.json').packages['node_modules/$pkg'].integrity")
		echo "package $pkg $ver $integ"
	done
	for f in "${files[@]}"; do
		read -r pkg src dst <<<"$f"
		cp "$work/node_modules/$pkg/$src" "$out/$dst"
		echo "file $dst $pkg/$src $(sha256sum "$out/$dst" | cut -d' ' -f1)"
	done
} >"$out/SOURCES"

if $check; then
	if ! diff -r "$out" "$vendor" >/dev/null; then
		diff -r "$out" "$vendor" | head -20
		echo "web-assets: $vendor differs from what the lockfile installs; run scripts/web-assets.sh and commit the result" >&2
		exit 1
	fi
	echo "web-assets: $vendor matches internal/web/ui/package-lock.json"
	exit 0
fi
rm -rf "$vendor"
mkdir -p "$vendor"
cp "$out"/* "$vendor/"
echo "web-assets: vendored into $vendor:"
ls -l "$vendor"
