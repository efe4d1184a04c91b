#!/usr/bin/env bash
# Runs the datapath's tests (internal/datapath) on another kernel: a Debian
# kernel package booted in qemu with a minimal initramfs (busybox, the
# test binary, the qdisc and veth modules). Not part of CI; it is how
# docs/kernels.md's 6.1 and 5.15 findings were made.
#
#   scripts/kernel-vm.sh                          TestClassifyMatchesReference, on Debian's linux-image-amd64
#   scripts/kernel-vm.sh -run 'TestX|TestY'       other tests
#   KERNEL_PKG=linux-image-6.1.0-56-amd64 scripts/kernel-vm.sh
#   HOSTQOS_VERIFIER_COST=1 scripts/kernel-vm.sh -run TestVerifierCost
#                                                 the verifier's cost per program
#   scripts/kernel-vm.sh -daemon                  hostqosd itself instead: a dummy link at
#                                                 10mbit, a flow rule and an app rule (exe
#                                                 busybox), TCP connects that match each;
#                                                 prints its log, status, rule and flow counters
#   KERNEL_PKG=ubuntu-5.15 scripts/kernel-vm.sh   a kernel extracted by hand into
#                                                 $KVM_WORK/ubuntu-5.15 (boot/, lib/modules/;
#                                                 e.g. Ubuntu's linux-image-unsigned and
#                                                 linux-modules 5.15 .debs, dpkg -x)
#
# Needs root, apt (qemu-system-x86, busybox-static) and a few GB of memory.
# Runs under qemu's emulator (TCG: slow, minutes); KVM=1 uses KVM instead
# (on our nested-virtualised machines a KVM guest hangs at boot).
set -euo pipefail
cd "$(dirname "$0")/.."

run=TestClassifyMatchesReference
daemon=
if [ "${1:-}" = -run ]; then
	run=$2
elif [ "${1:-}" = -daemon ]; then
	daemon=1
fi
work=${KVM_WORK:-/tmp/hostqos-kernel-vm}
mkdir -p "$work"
for tool in qemu-system-x86_64 busybox; do
	command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-system-x86 busybox-static >/dev/null
done
pkg=${KERNEL_PKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
if [ ! -d "$work/$pkg" ]; then
	(cd "$work" && apt-get download "$pkg" >/dev/null && dpkg -x "$pkg"_*.deb "$pkg")
fi
kdir=$(echo "$work/$pkg"/lib/modules/*)
vmlinuz=$(echo "$work/$pkg"/boot/vmlinuz-*)

root="$work/root"
rm -rf "$root"
mkdir -p "$root"/{bin,proc,sys,dev,tmp,mods}
cp "$(command -v busybox)" "$root/bin/"
for c in sh mount insmod poweroff echo mkdir cat sed grep uname ip sleep kill nc; do ln -s busybox "$root/bin/$c"; done
# veth, the qdiscs and cls_bpf for the links; xfrm and nfnetlink for the
# netlink handles the tests open in each namespace.
for m in drivers/net/veth net/sched/cls_bpf net/sched/sch_ingress net/sched/sch_htb net/xfrm/xfrm_algo net/xfrm/xfrm_user net/netfilter/nfnetlink drivers/net/dummy; do
	cp "$kdir/kernel/$m.ko" "$root/mods/"
done
if [ -n "$daemon" ]; then
	CGO_ENABLED=0 go build -o "$root/" ./cmd/hostqosd ./cmd/hostqos
	cat >"$root/cfg.toml" <<'CFG'
[[link]]
name = "hq0"
egress_rate = "10mbit"

[[rule]]
name = "flow"
proto = "tcp"
rport = 5000
class = "voice"

[[rule]]
name = "app"
exe = "/bin/busybox"
proto = "tcp"
rport = 6000
class = "bulk"
CFG
else
	CGO_ENABLED=0 go test -c -o "$root/dp.test" ./internal/datapath
fi
cat >"$root/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mkdir -p /sys/fs/bpf /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
for m in /mods/*.ko; do insmod $m; done
echo "=== kernel $(uname -r)"
cd /tmp
if [ -x /hostqosd ]; then
	ip link add name hq0 type dummy
	ip addr add 198.18.0.1/24 dev hq0
	ip link set hq0 up
	/hostqosd --config /cfg.toml --state-dir /tmp/state --no-history 2>&1 &
	pid=$!
	sleep 40 # the verifier, under the emulator
	for p in 5000 6000 7000; do nc -w 1 198.18.0.2 $p </dev/null; done
	sleep 2
	/hostqos status
	/hostqos stat rules
	/hostqos stat flows
	kill $pid
	sleep 5
else
	RUN=$(sed -n 's/.*testrun=\([^ ]*\).*/\1/p' /proc/cmdline)
	/dp.test -test.v -test.count=1 -test.run "$RUN" 2>&1 | grep -v ' INFO '
fi
echo "=== done"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")

accel=(-accel tcg,thread=multi -cpu max)
if [ -n "${KVM:-}" ]; then
	accel=(-enable-kvm -cpu host)
fi
exec qemu-system-x86_64 "${accel[@]}" -m 3072 -smp 2 -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1 testrun=$run${HOSTQOS_VERIFIER_COST:+ HOSTQOS_VERIFIER_COST=$HOSTQOS_VERIFIER_COST}" -nographic -no-reboot
