package engine

// Caller is who asks the engine for something, as the front door learnt
// it (the API: SO_PEERCRED of the connection and group membership).
type Caller struct {
	PID        int
	UID, GID   uint32
	Privileged bool // root or member of group hostqos: may change policy
}

// errChangeForbidden is what an ordinary user is told who tries to change
// host policy.
const errChangeForbidden = "changing host policy needs root or membership of group hostqos; you may read status and stats, and run your own programs in classes the admin allows (hostqos run)"

// MayChange decides whether the caller may change host policy (links,
// classes, rules, reload, down): root and group hostqos may; ordinary users
// get a *ForbiddenError. Every policy change of the engine asks it; front
// doors may ask it first, before reading the request.
func (c Caller) MayChange() error {
	if !c.Privileged {
		return &ForbiddenError{Why: errChangeForbidden}
	}
	return nil
}

// MayOnlySeeOwn reports whether the caller sees only their own flows,
// apps and runs (an ordinary user), and returns their uid.
func (c Caller) MayOnlySeeOwn() (uid int64) {
	if c.Privileged {
		return -1
	}
	return int64(c.UID)
}
