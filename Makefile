# hostqos — the commands of the README:
#   make demo        run the end-to-end demo (as root)
#   make test        run every test but the long smoke tests (as root for the kernel tests)
#   make test-long   the long smoke tests: a short demo run, the cheap benchmarks (as root)

GO       ?= go
BIN      := bin
PKGS     := ./...
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# Both binaries print VERSION for --version (dev when built without it);
# EXTRA_LDFLAGS adds to it (the package strips its binaries: -s -w).
LDFLAGS  := -X github.com/hostqos/hostqos/internal/daemon.Version=$(VERSION) -X main.version=$(VERSION) $(EXTRA_LDFLAGS)
# Test timeout per package: the integration tests' parallel process takes
# about 5 minutes alone and nearly 10 on a machine loaded by other work;
# the whole suite stays well under 15 minutes alone.
TEST_TIMEOUT ?= 900s
TEST_PARALLEL ?= 8

.PHONY: all build lib deps generate check-generated check-format check-web-assets test test-long test-unit vet fmt fuzz fuzz-ci bench demo unit completion install uninstall man deb test-deb clean

all: build

deps:
	scripts/install-deps.sh

build: lib
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# libhostqos, the QSockets C library (shared, static, pkg-config file), with
# the system C compiler; see libhostqos/Makefile and docs/qsockets.md.
lib:
	$(MAKE) -C libhostqos

# Rebuild vmlinux.h (if missing) and the BPF objects and their Go bindings.
# The results are committed, so a plain build needs no clang.
generate:
	scripts/install-deps.sh --bpf
	scripts/gen-bpf.sh

# Regenerate the BPF objects and their bindings with the pinned clang and
# fail when they differ from the committed ones (make test runs this, so CI
# does). The same clang gives byte-identical objects from any checkout.
GENERATED := internal/datapath/hostqos_bpfel.o internal/datapath/hostqos_bpfel.go internal/datapath/xdp/hqxdp_bpfel.o internal/datapath/xdp/hqxdp_bpfel.go \
	internal/datapath/unitdscp_bpfel_test.o internal/datapath/unitdscp_bpfel_test.go \
	internal/datapath/unitpolice_bpfel_test.o internal/datapath/unitpolice_bpfel_test.go \
	internal/datapath/unitresv_bpfel_test.o internal/datapath/unitresv_bpfel_test.go
check-generated: generate
	@git diff --exit-code --stat -- $(GENERATED) bpf/include/vmlinux.h || { echo "check-generated: the committed BPF objects differ from what the sources generate; run make generate and commit the result"; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard internal/datapath bpf)" || { echo "check-generated: uncommitted generated files:"; git ls-files --others --exclude-standard internal/datapath bpf; exit 1; }

# The BPF C: the program files (the datapath's and the XDP shield's), the
# headers of their concerns, the tests' programs that run one header's
# helpers alone, and the ABI.
BPF_C := internal/datapath/*.bpf.c internal/datapath/xdp/*.bpf.c internal/datapath/bpf/*.h internal/datapath/bpf/tests/*.bpf.c bpf/include/hostqos.h

# The web view's vendored JavaScript (internal/web/assets/vendor) as npm
# installs it from internal/web/ui/package-lock.json: rebuilt in a scratch
# directory and diffed (skips without npm; internal/web's tests check the
# files against the lockfile either way). scripts/web-assets.sh re-vendors.
check-web-assets:
	scripts/web-assets.sh --check

# Format the Go code (gofmt) and the BPF C (clang-format, kernel style as
# set in .clang-format).
fmt:
	scripts/install-deps.sh --bpf
	gofmt -w api rtchan qsock cmd internal tests deploy
	clang-format -i $(BPF_C)

# The BPF C as `make fmt` leaves it (clang-format, installed by
# install-deps.sh --bpf, which check-generated runs first in make test).
check-format:
	@clang-format --dry-run --Werror $(BPF_C) || { echo "check-format: the BPF C differs from clang-format's layout; run make fmt"; exit 1; }

# go vet, staticcheck (a tool of go.mod: `go mod download` installs it) and
# gofmt; any finding fails.
vet:
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@test -z "$$(gofmt -l api rtchan qsock cmd internal tests bench deploy 2>/dev/null)" || { echo "gofmt needed:"; gofmt -l api rtchan qsock cmd internal tests bench deploy; exit 1; }

# Unit tests only (no root needed).
test-unit:
	$(GO) test -count=1 $(PKGS)

# The tests use the binaries the build target made (lab.TestBinaries copies
# them from HOSTQOS_BIN) instead of building their own; plain `go test`
# builds them as before.
test test-long: export HOSTQOS_BIN := $(abspath $(BIN))

# Everything but the long smoke tests: unit, BPF test-run, and namespace
# integration tests (root).
# Packages whose tests use the kernel or generate traffic (the package or
# its tests import one of SERIAL_TESTS_RE) run one at a time (-p 1): they
# measure rates and latencies and must not compete for the CPU. The other
# packages (pure Go) run first, two at a time. Both groups always run; a
# failure in either fails the target. Tests marked parallel (the
# integration tests that measure nothing) run after a package's others,
# TEST_PARALLEL at a time: they mostly wait for daemons and namespaces.
# The packages that run a Kubernetes control plane (internal/kubetest) are
# in the second group too: they start after the pure-Go packages, which
# leaves .ci/run's build of the kube-apiserver (beside them) the most time
# before they wait for it, and their API servers' start-up competes with
# nothing.
SERIAL_TESTS_RE := hostqos/internal/(testutil|testbed|lab|traffic|kubetest)|cilium/ebpf|vishvananda/netlink
# The integration tests run in two processes side by side: the measuring
# tests that send at most 20 Mbit/s and take little CPU (PAIRED_TESTS_RE)
# one at a time in one, everything else (the measuring tests one at a
# time, then the measurement-free ones TEST_PARALLEL at a time) in the
# other. A test that sends faster, floods, or times anything finer than
# a rate belongs to the second.
INTEGRATION_PKG := github.com/hostqos/hostqos/tests/integration
PAIRED_TESTS_RE := ^(TestPoliceLimitsUDP|TestVoicePriorityUnderBulk|TestMinBWSharesSaturatedLink|TestMaxBWLimitsTCPGoodput|TestControlledLoadReservation|TestGuaranteedReservationFlowControl|TestKill9KeepsEnforcing|TestQuotaLimitsApp|TestDownloadLimitUDP|TestReservations|TestRuleAppliesToOpenConnection|TestSocketsOpenBeforeDaemonStart|TestContainerRule)$$
# CI runs vet beside the tests (.ci/run: TEST_VET=).
TEST_VET ?= vet
test: deps $(TEST_VET) build check-generated check-format check-web-assets
	@pkgs=$$($(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' $(PKGS)) || exit 1; \
	unit=$$(echo "$$pkgs" | grep -Ev '$(SERIAL_TESTS_RE)' | cut -d' ' -f1); \
	serial=$$(echo "$$pkgs" | grep -E '$(SERIAL_TESTS_RE)' | cut -d' ' -f1); \
	rc=0; \
	echo "$(GO) test -count=1 -p 2 -timeout $(TEST_TIMEOUT) <the pure-Go packages>"; \
	[ -z "$$unit" ] || $(GO) test -count=1 -p 2 -timeout $(TEST_TIMEOUT) $$unit || rc=1; \
	rest=$$(echo "$$serial" | grep -vx '$(INTEGRATION_PKG)'); \
	echo "$(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) <the kernel and traffic packages>"; \
	[ -z "$$rest" ] || $(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) $$rest || rc=1; \
	if echo "$$serial" | grep -qx '$(INTEGRATION_PKG)'; then \
		echo "$(GO) test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) -skip '$(PAIRED_TESTS_RE)' ./tests/integration &"; \
		$(GO) test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) -skip '$(PAIRED_TESTS_RE)' ./tests/integration & it=$$!; \
		echo "$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(PAIRED_TESTS_RE)' ./tests/integration"; \
		$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(PAIRED_TESTS_RE)' ./tests/integration || rc=1; \
		wait $$it || rc=1; \
	fi; \
	exit $$rc

# The long smoke tests, which make test skips (testutil.Long): the demo's
# default scenario end to end (two 8 s runs) and the cheap benchmarks in
# quick mode. They keep the demo and bench tooling from rotting and
# measure nothing the suite relies on; CI runs them after make test.
LONG_TESTS := ^(TestDemoShort|TestQuickCheap|TestContainersQuickAll)$$
test-long: deps build
	HOSTQOS_LONG_TESTS=1 $(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) -run '$(LONG_TESTS)' ./internal/lab/demo ./internal/lab/bench

# Fuzzing: every Go fuzz target (config loader, API bodies, unit parsers,
# the datapath's packet parsing) for FUZZTIME each; `make test` runs their
# seed corpora (testdata/fuzz) only. FUZZ_ARGS names targets; SAVE=1 copies
# the inputs found into testdata/fuzz to commit (scripts/fuzz.sh).
FUZZTIME ?= 60s
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh $(FUZZ_ARGS)

# What CI runs after make test: a few seconds per target, two at a time.
fuzz-ci:
	FUZZTIME=2s scripts/fuzz.sh

bench: deps build
	$(BIN)/hostqos bench $(BENCH_ARGS)

demo: deps build
	$(BIN)/hostqos demo $(DEMO_ARGS)

# Install the binaries, the systemd unit, the group's sysusers.d file, an
# empty config (kept if present), the manual pages, shell completion and
# libhostqos. The unit is made from packaging/hostqosd.service for
# $(SBINDIR); LIBDIR, when set, is libhostqos's. With DESTDIR (staging for a package) nothing outside DESTDIR
# changes: the package's postinst creates the group hostqos; without it,
# systemd-sysusers (or groupadd) does here. docs/packaging.md.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
DATADIR     ?= $(PREFIX)/share
MANDIR      ?= $(DATADIR)/man
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(SYSCONFDIR)/systemd/system
SYSUSERSDIR ?= $(SYSCONFDIR)/sysusers.d
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR  ?= $(DATADIR)/zsh/site-functions
FISHCOMPDIR ?= $(DATADIR)/fish/vendor_completions.d

# What install adds besides the binaries, made from them: the unit for
# this SBINDIR and the completion scripts of this hostqos.
unit: build
	sed 's|^ExecStart=/usr/local/sbin/hostqosd |ExecStart=$(SBINDIR)/hostqosd |' packaging/hostqosd.service > $(BIN)/hostqosd.service
	grep -q '^ExecStart=$(SBINDIR)/hostqosd ' $(BIN)/hostqosd.service

completion: build
	@mkdir -p $(BIN)/completion
	$(BIN)/hostqos completion bash > $(BIN)/completion/hostqos
	$(BIN)/hostqos completion zsh > $(BIN)/completion/_hostqos
	$(BIN)/hostqos completion fish > $(BIN)/completion/hostqos.fish

install: build unit completion
	install -D -m 0755 $(BIN)/hostqosd $(DESTDIR)$(SBINDIR)/hostqosd
	install -D -m 0755 $(BIN)/hostqos $(DESTDIR)$(BINDIR)/hostqos
	install -D -m 0755 $(BIN)/hostqos-lab $(DESTDIR)$(BINDIR)/hostqos-lab
	install -D -m 0644 $(BIN)/hostqosd.service $(DESTDIR)$(UNITDIR)/hostqosd.service
	install -D -m 0644 packaging/hostqos.sysusers $(DESTDIR)$(SYSUSERSDIR)/hostqos.conf
	test -e $(DESTDIR)$(SYSCONFDIR)/hostqos/hostqos.toml || install -D -m 0644 packaging/hostqos.toml $(DESTDIR)$(SYSCONFDIR)/hostqos/hostqos.toml
	install -d $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 0644 packaging/man/*/*.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 packaging/man/*/*.8 $(DESTDIR)$(MANDIR)/man8/
	install -D -m 0644 $(BIN)/completion/hostqos $(DESTDIR)$(BASHCOMPDIR)/hostqos
	install -D -m 0644 $(BIN)/completion/_hostqos $(DESTDIR)$(ZSHCOMPDIR)/_hostqos
	install -D -m 0644 $(BIN)/completion/hostqos.fish $(DESTDIR)$(FISHCOMPDIR)/hostqos.fish
	$(MAKE) -C libhostqos install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) MANDIR=$(MANDIR) $(if $(LIBDIR),LIBDIR=$(LIBDIR))
ifeq ($(DESTDIR),)
	if command -v systemd-sysusers >/dev/null; then systemd-sysusers $(SYSUSERSDIR)/hostqos.conf; \
	else getent group hostqos >/dev/null || groupadd --system hostqos; fi
	@echo "installed; start with: systemctl daemon-reload && systemctl enable --now hostqosd"
else
	@echo "installed into $(DESTDIR); the group hostqos is not created there: run systemd-sysusers hostqos.conf on the target (a package's postinst does)"
endif

# Remove what install added (not the config file, nor the group).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/hostqosd $(DESTDIR)$(BINDIR)/hostqos $(DESTDIR)$(BINDIR)/hostqos-lab \
	      $(DESTDIR)$(UNITDIR)/hostqosd.service $(DESTDIR)$(SYSUSERSDIR)/hostqos.conf \
	      $(DESTDIR)$(BASHCOMPDIR)/hostqos $(DESTDIR)$(ZSHCOMPDIR)/_hostqos $(DESTDIR)$(FISHCOMPDIR)/hostqos.fish
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(wildcard packaging/man/*/*.5))) \
	      $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(wildcard packaging/man/*/*.8)))
	$(MAKE) -C libhostqos uninstall PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) MANDIR=$(MANDIR) $(if $(LIBDIR),LIBDIR=$(LIBDIR))

# The manual pages, made from the command trees (hostqos, hostqos-lab),
# hostqosd's flags and docs/config.md, into packaging/man (committed; the
# TestManPages tests fail when they differ from what this makes).
man:
	HOSTQOS_UPDATE_MAN=1 $(GO) test -count=1 -run '^TestManPages$$' ./cmd/hostqos ./cmd/hostqosd ./cmd/hostqos-lab

# The Debian package, in $(BIN)/ (scripts/build-deb.sh; dpkg-deb, no
# debhelper), checked by lintian.
deb:
	scripts/build-deb.sh

# make install and the package on a Debian system of their own: a chroot
# made once by debootstrap and cached (scripts/test-deb.sh); as root.
test-deb:
	scripts/test-deb.sh

clean:
	rm -rf $(BIN)
	$(MAKE) -C libhostqos clean
