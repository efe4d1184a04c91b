package kube

import "time"

// SetPoliciesProbeInterval sets how often an agent without the CRDs looks
// for them again (tests); it returns a function that puts it back.
func SetPoliciesProbeInterval(d time.Duration) func() {
	old := policiesProbeInterval
	policiesProbeInterval = d
	return func() { policiesProbeInterval = old }
}

// SetPolicyGrace sets how long the first sync waits for the policies
// (tests); it returns a function that puts it back.
func SetPolicyGrace(d time.Duration) func() {
	old := policyGrace
	policyGrace = d
	return func() { policyGrace = old }
}
