package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI executes the CLI in-process with a fresh command tree and
// in-memory streams, and returns its error.
func runCLI(args ...string) error {
	var out, errOut bytes.Buffer
	f := newFactory(ioStreams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	root := newRootCmd(f)
	root.SetArgs(args)
	return execute(f, root)
}

// TestBadFlagsNameFlagAndValue: invalid input is refused before anything
// is sent, naming the flag and the value.
func TestBadFlagsNameFlagAndValue(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"rule", "add", "x", "--maxbw", "10mbt"}, []string{"--maxbw", "10mbt"}},
		{[]string{"rule", "add", "x", "--remote", "198.18.0.1/15"}, []string{"--remote", "host bits"}},
		{[]string{"rule", "add", "x", "--dscp", "AF55"}, []string{"--dscp", "AF55"}},
		{[]string{"rule", "add", "x", "--proto", "sctp"}, []string{"--proto", "sctp"}},
		{[]string{"rule", "add", "x", "--exe", "bin/app"}, []string{"--exe", "absolute"}},
		{[]string{"rule", "add", "x", "--precedence", "70000"}, []string{"--precedence", "70000"}},
		{[]string{"link", "set", "eth0", "--reservable", "1.5"}, []string{"--reservable", "1.5"}},
		{[]string{"class", "set", "voice", "--priority", "9"}, []string{"--priority", "9"}},
		{[]string{"run", "--maxbw", "fast", "--", "true"}, []string{"--maxbw", "fast"}},
		{[]string{"stat", "everything"}, []string{"everything"}},
		{[]string{"status", "-o", "yaml"}, []string{"--output", "yaml"}},
		{[]string{"tool", "udp-send", "--to", "nowhere", "--pps", "10"}, []string{"to", "nowhere"}},
		{[]string{"tool", "voice", "--to", "198.18.0.2:7", "--calls", "0"}, []string{"calls", "0"}},
		{[]string{"tool", "tcp-send", "--to", "198.18.0.2:7", "--streams", "5000"}, []string{"streams", "5000"}},
		{[]string{"tool", "udp-send", "--to", "198.18.0.2:7", "--pps", "20000000"}, []string{"--pps", "2e+07", "10000000"}},
		{[]string{"tool", "udp-send", "--to", "198.18.0.2:7", "--rate", "1mbit", "--pps", "5"}, []string{"--pps", "given together"}},
		{[]string{"tool", "video", "--to", "198.18.0.2:7", "--max-payload", "10"}, []string{"--max-payload", "10"}},
		{[]string{"tool", "pareto", "--to", "198.18.0.2:7", "--k", "4mbit", "--cap", "2mbit"}, []string{"--cap", "2mbit", "below k 4mbit"}},
		{[]string{"tool", "fct", "--to", "198.18.0.2:7", "--size", "20GiB"}, []string{"--size", "20GiB", "16GiB"}},
		{[]string{"tool", "udp-sink", "--listen", "nowhere"}, []string{"--listen", "nowhere", "host:port"}},
		{[]string{"tool", "video", "--to", "198.18.0.2:7", "--fps", "0"}, []string{"--fps", "0", "default (25)"}},
		{[]string{"tool", "video", "--to", "198.18.0.2:7", "--i-size", "0"}, []string{"--i-size", "0"}},
		{[]string{"tool", "fct", "--to", "198.18.0.2:7", "--timeout", "0s"}, []string{"--timeout", "0s"}},
		{[]string{"tool", "udp-send", "--to", "198.18.0.2:7", "--pps", "10", "--duration", "0s"}, []string{"--duration", "0s"}},
	} {
		err := runCLI(append([]string{"--socket", "/nonexistent/hostqos.sock"}, c.args...)...)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %q", c.args, err, w)
			}
		}
		if strings.Contains(err.Error(), "hostqosd is not running") {
			t.Errorf("%v: reached the daemon instead of refusing the flag: %v", c.args, err)
		}
	}
}
