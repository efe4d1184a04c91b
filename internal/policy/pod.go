package policy

// ValidateRuleProperties checks what a rule does (its class, DSCP,
// guarantee, ceilings and download limit) as Validate does, against p's
// classes, for a rule another front door makes whose name and selectors
// are its own (a Kubernetes pod's: it selects the pod's containers).
// Errors name obj and source.
func (p *Policy) ValidateRuleProperties(source, obj string, r Rule) error {
	v := &validator{src: source}
	v.maxRates(obj, rateField{"minbw", r.MinBW}, rateField{"maxbw", r.MaxBW}, rateField{"maxbw_in", r.MaxBWIn})
	v.ruleProperties(obj, r, p)
	return v.errs.err()
}
