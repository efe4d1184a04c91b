package daemon

import (
	"bufio"
	"encoding/json"
	"io"
	"reflect"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/hostqos/hostqos/api"
)

// An answer of more than bigAnswer bytes or bigList elements makes the
// daemon give the memory it took back to the OS soon (see trimSoon), also
// when the client did not read it.
const (
	bigAnswer = 1 << 20
	bigList   = 1024
)

// countingWriter counts what went through.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeList writes the slice v as the indented JSON array json.Encoder
// with SetIndent("", "  ") would write, one element at a time, so that a
// long answer never sits whole in memory (and a client that does not read
// holds one element's encoding, not the whole list).
func writeList(w io.Writer, v reflect.Value) error {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	defer func() {
		// Also when the client went away before it read it all.
		if cw.n > bigAnswer || v.Len() > bigList {
			trimSoon()
		}
	}()
	if _, err := bw.WriteString("["); err != nil {
		return err
	}
	for i := 0; i < v.Len(); i++ {
		sep := ",\n  "
		if i == 0 {
			sep = "\n  "
		}
		b, err := json.MarshalIndent(v.Index(i).Interface(), "  ", "  ")
		if err != nil {
			return err
		}
		if _, err := bw.WriteString(sep); err != nil {
			return err
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	if _, err := bw.WriteString("\n]\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// writeStats writes a statistics answer as compact JSON (the encoding of
// api.Stats), streaming its one list element by element: a full flow table
// is tens of megabytes of JSON.
func writeStats(w io.Writer, st api.Stats) error {
	var name string
	var list reflect.Value
	switch {
	case st.Rules != nil:
		name, list = "rules", reflect.ValueOf(st.Rules)
	case st.Classes != nil:
		name, list = "classes", reflect.ValueOf(st.Classes)
	case st.Apps != nil:
		name, list = "apps", reflect.ValueOf(st.Apps)
	case st.Flows != nil:
		name, list = "flows", reflect.ValueOf(st.Flows)
	case st.Links != nil:
		name, list = "links", reflect.ValueOf(st.Links)
	}
	head, err := json.Marshal(api.Stats{Time: st.Time, Interval: st.Interval})
	if err != nil {
		return err
	}
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	defer func() {
		if cw.n > bigAnswer || list.IsValid() && list.Len() > bigList {
			trimSoon()
		}
	}()
	if !list.IsValid() || list.Len() == 0 {
		bw.Write(head)
	} else {
		bw.Write(head[:len(head)-1]) // without the closing brace
		bw.WriteString(`,"` + name + `":[`)
		for i := 0; i < list.Len(); i++ {
			if i > 0 {
				bw.WriteString(",")
			}
			b, err := json.Marshal(list.Index(i).Interface())
			if err != nil {
				return err
			}
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
		bw.WriteString("]}")
	}
	bw.WriteString("\n")
	return bw.Flush()
}

// trimPending is set while a trim is scheduled.
var trimPending atomic.Bool

// trimSoon returns the memory a big answer took to the OS a second later
// (at most once a second). Without it, an idle daemon keeps a big answer's
// heap for minutes, until the next garbage collection and the scavenger.
func trimSoon() {
	if trimPending.CompareAndSwap(false, true) {
		time.AfterFunc(time.Second, func() {
			debug.FreeOSMemory()
			trimPending.Store(false)
		})
	}
}
