#!/usr/bin/env bash
# Starts a Docker daemon for the container tests unless one already answers
# on /run/docker.sock, and waits for it. The daemon it starts touches
# nothing of the host's network: no docker0 bridge, no iptables or
# ip6tables rules, no userland proxy; the tests give each container a
# network namespace of their own (`docker run --network none`, then a veth
# moved in). Safe to call twice, and from several tests at once.
#
#   scripts/dockerd.sh          start (if needed) and wait, at most 30 s
#   scripts/dockerd.sh --stop   stop the daemon this script started (if any)
#
# Its log is /run/hostqos-dockerd/dockerd.log, its pid file
# /run/hostqos-dockerd/dockerd.pid.
set -euo pipefail

sock=/run/docker.sock
state=/run/hostqos-dockerd
pidfile=$state/dockerd.pid

answers() { docker -H "unix://$sock" version >/dev/null 2>&1; }

if [[ "${1:-}" == "--stop" ]]; then
	if [[ -s $pidfile ]]; then
		pid=$(cat "$pidfile")
		if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
			kill "$pid"
			for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
		rm -f "$pidfile"
	fi
	exit 0
fi

[[ $(id -u) -eq 0 ]] || {
	echo "dockerd.sh: must run as root" >&2
	exit 1
}
command -v dockerd >/dev/null || {
	echo "dockerd.sh: dockerd is missing (apt-get install docker.io)" >&2
	exit 1
}
mkdir -p "$state"
# One caller starts the daemon; the others wait for the socket.
exec 9>"$state/lock"
flock 9
if ! answers; then
	if [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		: # started by an earlier call and still coming up
	else
		# Without systemd, Docker uses the cgroupfs driver; with its own
		# containerd (dockerd starts one under $state/exec when none is
		# configured).
		setsid dockerd \
			--host "unix://$sock" \
			--bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
			--userland-proxy=false \
			--exec-root "$state/exec" --pidfile "$pidfile" \
			>"$state/dockerd.log" 2>&1 </dev/null 9>&- &
	fi
fi
for _ in $(seq 300); do
	if answers; then
		# /var/run/docker.sock is where clients look by default.
		[[ -e /var/run/docker.sock ]] || ln -s "$sock" /var/run/docker.sock 2>/dev/null || true
		exit 0
	fi
	sleep 0.1
done
echo "dockerd.sh: Docker did not answer on $sock within 30 s; see $state/dockerd.log:" >&2
tail -n 20 "$state/dockerd.log" >&2 || true
exit 1
