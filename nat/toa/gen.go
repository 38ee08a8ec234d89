package toa

// The programs are compiled by `make bpf` (clang and llvm from Debian's
// packages) and the objects committed, so that building lvsd needs no clang;
// `make bpf-check` proves the committed objects match the sources. The make
// targets set BPF_MULTIARCH to the host's Debian multiarch folder
// (x86_64-linux-gnu, aarch64-linux-gnu), where <asm/types.h> lives.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/$BPF_MULTIARCH" -target bpfel -type toa_vip director bpf/director.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/$BPF_MULTIARCH" -target bpfel -type toa_addr -type toa_peer realServer bpf/realserver.c
