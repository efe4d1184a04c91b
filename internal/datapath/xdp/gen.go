package xdp

// The XDP object and its Go bindings are generated and committed like the
// datapath's (see ../gen.go: scripts/gen-bpf.sh, make check-generated),
// with the same bpf2go and clang-14, from hqxdp.bpf.c and its ABI header
// bpf/include/hqxdp.h.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel hqxdp hqxdp.bpf.c -- -I../../../bpf/include
