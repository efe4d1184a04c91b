package rsvp

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// FuzzDecode feeds raw message bytes to the parser: it must never panic,
// and whatever it accepts must encode again and decode to the same message.
func FuzzDecode(f *testing.F) {
	for _, m := range allSamples() {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x10, 1, 0, 0, 64, 0, 0, 8})
	// A node that is sender, router and receiver at once (every address
	// of the samples is "local" or routed through it) with state to hit.
	node := NewNode(Config{Local: func(dst netip.Addr) (netip.Addr, bool, error) {
		return dst, dst.IsValid() && dst.As16()[15]%2 == 0, nil
	}, Install: nopInstall{}, Refresh: time.Second, Router: true})
	now := time.Unix(1000, 0)
	if _, err := node.Sender(testKey, testTspec, now); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		e, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded message does not encode: %v\n%+v", err, m)
		}
		m2, err := Decode(e)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, m2)
		}
		// Whatever the parser accepts, the soft state handles without
		// panicking, and what it answers encodes.
		var src netip.Addr
		if m.Hop != nil {
			src = m.Hop.Addr // a tear or error from the hop it names
		}
		for _, o := range node.Handle(m, src, now) {
			if _, err := o.Msg.Encode(); err != nil {
				t.Fatalf("answer to %s does not encode: %v", m.Type, err)
			}
		}
		now = now.Add(time.Second)
		node.Tick(now)
	})
}
