package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// meta is what a runtime says of a container beyond the kernel's facts.
type meta struct {
	name, image string
	labels      map[string]string
	// guessed: the runtime did not answer (yet: a container is in the
	// kernel before it is in its runtime's list); asked again after
	// reaskGuessed.
	guessed bool
	at      time.Time
}

// reaskGuessed is how often a runtime is asked again about a container it
// did not know.
const reaskGuessed = 200 * time.Millisecond

// metaSource answers names, images and labels: a runtime's API if it
// answers, else its files, else nothing (the name is then the short id).
// Answers are cached by container; refresh re-asks.
type metaSource struct {
	cfg   Config
	log   *slog.Logger
	cache map[key]meta
	// Per scan: each runtime's API is listed at most once.
	listed map[Runtime]map[string]meta
	// The last failed API call per runtime: not retried for a second.
	failed map[Runtime]time.Time
	// Podman's files.
	podmanStore, podmanBolt fileCache
	warned                  map[string]bool
}

func newMetaSource(cfg Config, log *slog.Logger) *metaSource {
	return &metaSource{cfg: cfg, log: log, cache: map[key]meta{}, failed: map[Runtime]time.Time{}, warned: map[string]bool{}}
}

// beginScan starts a scan: API lists are asked afresh when needed.
func (m *metaSource) beginScan() { m.listed = map[Runtime]map[string]meta{} }

// forget drops the cache of containers not in keep.
func (m *metaSource) forget(keep map[key]bool) {
	for k := range m.cache {
		if !keep[k] {
			delete(m.cache, k)
		}
	}
}

// get is what is known of container k; refresh re-reads it.
func (m *metaSource) get(k key, refresh bool) meta {
	old, cached := m.cache[k]
	if cached && !refresh && (!old.guessed || time.Since(old.at) < reaskGuessed) {
		return old
	}
	md, ok := m.lookup(k)
	if !ok {
		md = meta{name: ShortID(k.id), guessed: true}
		if cached && !old.guessed {
			md = old // the runtime stopped answering: keep what it said
		}
	}
	md.at = time.Now()
	md.name = cut(md.name, MaxNameLen)
	md.image = cut(md.image, MaxNameLen)
	md.labels = boundLabels(md.labels)
	m.cache[k] = md
	return md
}

func (m *metaSource) lookup(k key) (meta, bool) {
	switch k.rt {
	case Docker:
		for _, sock := range m.sockets(Docker) {
			if md, ok := m.fromAPI(Docker, sock, k.id); ok {
				return md, true
			}
		}
		return m.dockerDisk(k.id)
	case Podman:
		for _, sock := range m.sockets(Podman) {
			if md, ok := m.fromAPI(Podman, sock, k.id); ok {
				return md, true
			}
		}
		return m.podmanDisk(k.id)
	case Containerd:
		return m.containerdDisk(k.id)
	}
	return meta{}, false
}

func (m *metaSource) sockets(rt Runtime) []string {
	switch rt {
	case Docker:
		if m.cfg.DockerSocket == "-" {
			return nil
		}
		if m.cfg.DockerSocket != "" {
			return []string{m.cfg.DockerSocket}
		}
		return []string{"/run/docker.sock", "/var/run/docker.sock"}
	case Podman:
		if m.cfg.PodmanSocket == "-" {
			return nil
		}
		return []string{m.cfg.PodmanSocket}
	}
	return nil
}

// fromAPI asks the runtime's Docker-compatible API (Docker's, Podman's)
// for its running containers, once per scan.
func (m *metaSource) fromAPI(rt Runtime, sock, id string) (meta, bool) {
	list, ok := m.listed[rt]
	if !ok {
		if t, failed := m.failed[rt]; failed && time.Since(t) < time.Second {
			return meta{}, false
		}
		if _, err := os.Stat(sock); err != nil {
			return meta{}, false
		}
		var err error
		if list, err = listAPI(sock); err != nil {
			m.failed[rt] = time.Now()
			m.warnOnce("api:"+sock, "container runtime API does not answer; names from its files or short ids",
				"runtime", string(rt), "socket", sock, "error", err)
			return meta{}, false
		}
		delete(m.failed, rt)
		m.listed[rt] = list
	}
	md, ok := list[id]
	return md, ok
}

func (m *metaSource) warnOnce(what, msg string, args ...any) {
	if m.warned[what] {
		return
	}
	m.warned[what] = true
	m.log.Warn(msg, args...)
}

// apiContainer is one entry of GET /containers/json (Docker Engine API,
// also served by Podman's compatible API).
type apiContainer struct {
	ID     string            `json:"Id"`
	Names  []string          `json:"Names"`
	Image  string            `json:"Image"`
	Labels map[string]string `json:"Labels"`
}

// listAPI lists the running containers of the API on the Unix socket sock:
// a bounded answer within apiTimeout.
func listAPI(sock string) (map[string]meta, error) {
	client := &http.Client{
		Timeout: apiTimeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		},
	}
	resp, err := client.Get("http://runtime/containers/json?all=0")
	if err != nil {
		return nil, fmt.Errorf("list containers on %s: %w", sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list containers on %s: %s", sock, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIResponse+1))
	if err != nil {
		return nil, fmt.Errorf("list containers on %s: %w", sock, err)
	}
	if len(body) > maxAPIResponse {
		return nil, fmt.Errorf("list containers on %s: answer longer than %d bytes", sock, maxAPIResponse)
	}
	var list []apiContainer
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("list containers on %s: %w", sock, err)
	}
	out := make(map[string]meta, len(list))
	for _, c := range list {
		if !isHexID(c.ID) || len(out) >= MaxContainers {
			continue
		}
		md := meta{image: c.Image, labels: c.Labels}
		if len(c.Names) > 0 {
			md.name = strings.TrimPrefix(c.Names[0], "/")
		}
		if md.name == "" {
			md.name = ShortID(c.ID)
		}
		out[c.ID] = md
	}
	return out, nil
}

// readBounded reads at most limit bytes of path; longer files are an error.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: longer than %d bytes", path, limit)
	}
	return b, nil
}

// dockerDisk reads Docker's config.v2.json of the container.
func (m *metaSource) dockerDisk(id string) (meta, bool) {
	b, err := readBounded(filepath.Join(m.cfg.DockerRoot, "containers", id, "config.v2.json"), maxFileRead)
	if err != nil {
		return meta{}, false
	}
	var c struct {
		Name   string
		Config struct {
			Image  string
			Labels map[string]string
		}
	}
	if json.Unmarshal(b, &c) != nil {
		return meta{}, false
	}
	name := strings.TrimPrefix(c.Name, "/")
	if name == "" {
		name = ShortID(id)
	}
	return meta{name: name, image: c.Config.Image, labels: c.Config.Labels}, true
}

// podmanDisk reads Podman's files: the container store's containers.json
// has the name and image; the labels are only in libpod's database
// (libpod/bolt_state.db, a BoltDB file whose values — the container's
// JSON configuration among them — are stored contiguously). Each file is
// parsed once per change.
func (m *metaSource) podmanDisk(id string) (meta, bool) {
	store := m.podmanStore.load(filepath.Join(m.cfg.PodmanStorage, "overlay-containers", "containers.json"),
		4*maxFileRead, parsePodmanStore)
	md, ok := store[id]
	if !ok {
		return meta{}, false
	}
	md.labels = m.podmanBolt.load(filepath.Join(m.cfg.PodmanStorage, "libpod", "bolt_state.db"),
		maxBoltRead, parseBoltLabels)[id].labels
	return md, true
}

// fileCache is a file parsed into metadata by container id, parsed again
// when its size or time changes.
type fileCache struct {
	stamp [2]int64
	byID  map[string]meta
}

func (c *fileCache) load(path string, limit int64, parse func([]byte) map[string]meta) map[string]meta {
	st, err := os.Stat(path)
	if err != nil {
		c.stamp, c.byID = [2]int64{}, nil
		return nil
	}
	stamp := [2]int64{st.Size(), st.ModTime().UnixNano()}
	if stamp == c.stamp {
		return c.byID
	}
	b, err := readBounded(path, limit)
	if err != nil {
		c.stamp, c.byID = [2]int64{}, nil
		return nil
	}
	c.stamp, c.byID = stamp, parse(b)
	return c.byID
}

func parsePodmanStore(b []byte) map[string]meta {
	var list []struct {
		ID       string   `json:"id"`
		Names    []string `json:"names"`
		Metadata string   `json:"metadata"`
	}
	if json.Unmarshal(b, &list) != nil {
		return nil
	}
	out := map[string]meta{}
	for _, c := range list {
		if !isHexID(c.ID) || len(out) >= MaxContainers {
			continue
		}
		md := meta{name: ShortID(c.ID)}
		if len(c.Names) > 0 && c.Names[0] != "" {
			md.name = c.Names[0]
		}
		var extra struct {
			ImageName string `json:"image-name"`
		}
		if json.Unmarshal([]byte(c.Metadata), &extra) == nil {
			md.image = extra.ImageName
		}
		out[c.ID] = md
	}
	return out
}

// maxBoltRead bounds the read of libpod's database.
const maxBoltRead = 64 << 20

// parseBoltLabels finds libpod's JSON configurations of containers in the
// bytes of its database — objects {"spec":{...},"id":"<id>",...,
// "labels":{...},...} — and returns their labels by id. A configuration
// seen twice (a page BoltDB freed but did not overwrite) counts once: the
// first that decodes.
func parseBoltLabels(data []byte) map[string]meta {
	out := map[string]meta{}
	marker := []byte(`{"spec":`)
	for off := 0; off < len(data) && len(out) < MaxContainers; {
		i := bytes.Index(data[off:], marker)
		if i < 0 {
			break
		}
		at := off + i
		off = at + len(marker)
		var cfg struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		}
		dec := json.NewDecoder(bytes.NewReader(data[at:]))
		if dec.Decode(&cfg) != nil || !isHexID(cfg.ID) {
			continue
		}
		if _, dup := out[cfg.ID]; !dup {
			out[cfg.ID] = meta{labels: boundLabels(cfg.Labels)}
		}
		off = at + int(dec.InputOffset())
	}
	return out
}

// containerdDisk reads the OCI bundle of a containerd task: CRI's and
// nerdctl's annotations name it; all annotations are its labels.
func (m *metaSource) containerdDisk(id string) (meta, bool) {
	tasks := filepath.Join(m.cfg.ContainerdState, "io.containerd.runtime.v2.task")
	nss, err := os.ReadDir(tasks)
	if err != nil {
		return meta{}, false
	}
	for _, ns := range nss {
		b, err := readBounded(filepath.Join(tasks, ns.Name(), id, "config.json"), maxFileRead)
		if err != nil {
			continue
		}
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(b, &spec) != nil {
			continue
		}
		a := spec.Annotations
		md := meta{labels: a}
		switch {
		case a["io.kubernetes.cri.container-name"] != "":
			md.name = a["io.kubernetes.cri.container-name"]
			if pod := a["io.kubernetes.cri.sandbox-name"]; pod != "" {
				md.name = pod + "/" + md.name
			}
		case a["nerdctl/name"] != "":
			md.name = a["nerdctl/name"]
		case a["io.kubernetes.cri.sandbox-name"] != "":
			md.name = a["io.kubernetes.cri.sandbox-name"]
		default:
			md.name = ShortID(id)
		}
		md.image = a["io.kubernetes.cri.image-name"]
		return md, true
	}
	return meta{}, false
}

// containerdTask reports whether containerd runs a task id in namespace ns
// (its cgroupfs layout, /<namespace>/<id>, allows any id).
func (m *metaSource) containerdTask(ns, id string) bool {
	if strings.HasPrefix(ns, ".") || strings.HasPrefix(id, ".") {
		return false
	}
	_, err := os.Stat(filepath.Join(m.cfg.ContainerdState, "io.containerd.runtime.v2.task", ns, id, "config.json"))
	return err == nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// boundLabels keeps at most MaxLabels labels (the first in key order) of
// bounded sizes.
func boundLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	keys := make([]string, 0, len(in))
	for k, v := range in {
		if k == "" || len(k) > MaxLabelKey || len(v) > MaxLabelValue {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > MaxLabels {
		keys = keys[:MaxLabels]
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = in[k]
	}
	return out
}
