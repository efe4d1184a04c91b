package datapath_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/dpbench"
)

// TestRandomPolicyIsTheReferencePolicy: the policy of random shapes the
// scale benchmark times (dpbench.RandomPolicy, a copy of this package's
// test helper) is the one TestClassifyMatchesReference checks the
// classifier with, as docs/benchmarks.md says.
func TestRandomPolicyIsTheReferencePolicy(t *testing.T) {
	for _, n := range []int{10, 1000, 10_000} {
		want := datapath.Policy{Rules: datapath.RandomRules(rand.New(rand.NewPCG(9, 10_000)), n, n/10)}
		if got := dpbench.RandomPolicy(n); !reflect.DeepEqual(got, want) {
			t.Errorf("RandomPolicy(%d) differs from the reference test's rules", n)
		}
	}
}
