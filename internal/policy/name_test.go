package policy

import "testing"

// TestValidNameMatchesRE: the hand-written name check accepts exactly what
// nameRE does.
func TestValidNameMatchesRE(t *testing.T) {
	for _, s := range []string{"", "a", "A", "-a", "a-", "a_b.c-d", "0", "_", "ab/c", "é", string(make([]byte, 63)), "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd", "a\n"} {
		if validName(s) != nameRE.MatchString(s) {
			t.Errorf("%q: validName %v, nameRE %v", s, validName(s), nameRE.MatchString(s))
		}
	}
}
