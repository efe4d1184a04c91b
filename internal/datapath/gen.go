package datapath

// The BPF objects and their Go bindings are generated and committed so that
// a plain `go build` needs no clang; scripts/gen-bpf.sh (make generate)
// rebuilds them.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type hq_rule hostqos hostqos.bpf.c -- -I../../bpf/include
