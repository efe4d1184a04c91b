package policy

import (
	"net"
	"strconv"
)

// WebSettings is the config file's [web] table: the local web view
// (docs/web.md). Read when the daemon starts, like Settings.
type WebSettings struct {
	// Listen is the TCP address (host:port) the web view is served on;
	// "" (no [web] table, or no listen in it): no web view.
	Listen string `toml:"listen"`
}

// webKey is the config file's [web] table.
const webKey = "web"

// webKeys are the keys of the [web] table.
var webKeys = []string{"listen"}

// CheckWebListen checks a web listen address: host:port with a port in
// 1…65535 and a host that is an IP address or "localhost". An address
// that is not on the loopback is allowed (behind an SSH tunnel it is
// not needed): the tokens guard it, but the traffic is plain HTTP.
func CheckWebListen(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || len(s) > 64 {
		return false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return false
	}
	return host == "localhost" || net.ParseIP(host) != nil
}

// web decodes the [web] table of raw into p.Web.
func (ld *loader) web(raw map[string]any, p *Policy) {
	v, ok := raw[webKey]
	if !ok {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		ld.fail("", webKey, ld.loc[keyLoc{"", -1, webKey}], nil, "want a table", "write it as a [web] section, with single brackets")
		return
	}
	line := func(k string) int { return ld.loc[keyLoc{webKey, -1, k}] }
	for _, k := range sortedKeys(m) {
		switch v := m[k]; k {
		case "listen":
			s, ok := v.(string)
			if !ok || !CheckWebListen(s) {
				ld.fail(webKey, k, line(k), v, "want HOST:PORT with an IP address or localhost", `write e.g. "127.0.0.1:9465"`)
				continue
			}
			p.Web.Listen = s
		default:
			ld.unknownKey(webKey, k, line(k), webKeys)
		}
	}
}
