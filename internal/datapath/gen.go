package datapath

// The BPF objects and their Go bindings are generated and committed so that
// a plain `go build` needs no clang; scripts/gen-bpf.sh (make generate)
// rebuilds them with bpf2go (a go tool, pinned in go.mod) and the pinned
// clang-14, and make check-generated fails when the result differs from
// what is committed. Types and enums of bpf/include/hostqos.h reach Go
// through the generated bindings (map and variable types, and the type
// anchors in hostqos.bpf.c); -type adds the ones nothing else uses. The
// XDP shield's object is generated beside its loader (xdp/gen.go).
//
// The unit* objects are the tests' (bpf_helpers_test.go): each includes
// one header of bpf/ and runs a helper of it alone. bpf2go writes them
// with a _test suffix, so that only the test binary embeds them.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type hq_rule hostqos hostqos.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-suffix _test unitDscp bpf/tests/dscp.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-suffix _test -type hqt_gcra_args -type hqt_police_args unitPolice bpf/tests/police.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-suffix _test unitResv bpf/tests/resv.bpf.c -- -I../../bpf/include
