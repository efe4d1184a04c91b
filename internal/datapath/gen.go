package datapath

// The BPF objects and their Go bindings are generated and committed so that
// a plain `go build` needs no clang; scripts/gen-bpf.sh (make generate)
// rebuilds them.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type hq_rule hostqos hostqos.bpf.c -- -I../../bpf/include
