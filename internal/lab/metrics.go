package lab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
)

// ScrapeMetrics reads the values of the unlabelled series names from the
// Prometheus text at http://addr/metrics, connecting from node's network
// namespace. A name the answer lacks is an error.
func ScrapeMetrics(ctx context.Context, node *testbed.Node, addr string, names ...string) (map[string]float64, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (c net.Conn, err error) {
			err = node.Do(func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, a)
				return err
			})
			return c, err
		}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape the daemon's metrics: %w", err)
	}
	defer resp.Body.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape the daemon's metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("scrape the daemon's metrics: no %s", n)
		}
	}
	return out, nil
}
