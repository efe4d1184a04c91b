package rsvp

import (
	"reflect"
	"testing"
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
	})
}
