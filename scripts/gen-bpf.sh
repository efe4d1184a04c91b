#!/usr/bin/env bash
# Regenerates hostqos's BPF objects and their Go bindings (bpf2go).
# vmlinux.h is generated from the running kernel's BTF only when missing,
# so CO-RE builds stay reproducible; delete it to refresh.
# Needs the pinned clang (clang-14, llvm-strip-14: scripts/install-deps.sh
# --bpf installs them; internal/datapath/gen.go calls them by name) and,
# when vmlinux.h is missing, bpftool. The same clang gives byte-identical
# objects from any checkout directory (make check-generated relies on it).
set -euo pipefail
cd "$(dirname "$0")/.."

vmlinux=bpf/include/vmlinux.h
if [ ! -s "$vmlinux" ]; then
	echo "gen-bpf: generating $vmlinux from /sys/kernel/btf/vmlinux" >&2
	bpftool btf dump file /sys/kernel/btf/vmlinux format c >"$vmlinux.tmp"
	mv "$vmlinux.tmp" "$vmlinux"
fi

for tool in clang-14 llvm-strip-14; do
	command -v "$tool" >/dev/null || { echo "gen-bpf: $tool not found; run scripts/install-deps.sh --bpf" >&2; exit 1; }
done
go generate ./internal/datapath/...
