#!/usr/bin/env bash
# Regenerates hostqos's BPF objects and their Go bindings (bpf2go).
# vmlinux.h is generated from the running kernel's BTF only when missing,
# so CO-RE builds stay reproducible; delete it to refresh.
# Needs clang (>= 14) and, when vmlinux.h is missing, bpftool.
set -euo pipefail
cd "$(dirname "$0")/.."

vmlinux=bpf/include/vmlinux.h
if [ ! -s "$vmlinux" ]; then
	echo "gen-bpf: generating $vmlinux from /sys/kernel/btf/vmlinux" >&2
	bpftool btf dump file /sys/kernel/btf/vmlinux format c >"$vmlinux.tmp"
	mv "$vmlinux.tmp" "$vmlinux"
fi

go generate ./internal/datapath/
