package election

import "time"

// lease is the agent's own bound on how long it may act as leader without
// hearing from Consul. Consul only promises never to invalidate a session
// early: the session's TTL runs out no sooner than SessionTTL after the last
// renewal Consul received, and the linked TTL check turns critical (taking
// the session with it) no sooner than CheckTTL after the last pass the
// Consul agent received. Both are counted here from when the request was
// sent, which is earlier, minus a margin, so the lease ends before Consul
// could let anyone else take a lock:
//
//	deadline = min(renewal sent + SessionTTL, pass sent + CheckTTL) - margin
//	           (latest successful ones)
//
// Two events mean the session may already be gone even though a later pass
// pushes the deadline out again, because a check that went critical and
// passes again does not bring its sessions back:
//   - the deadline passed (the lease lapsed);
//   - a pass completed after the previous pass's guarantee ran out (a gap
//     in which the check may have been critical), or the check was
//     registered again.
//
// After either, the lease stays invalid until a renewal sent after the
// event succeeds (proving the session outlived it) or a new session is
// created.
//
// lease is a plain value with no clock: the caller passes every time and
// holds the lock.
type lease struct {
	sessionTTL, checkTTL, margin time.Duration

	sessionUntil time.Time // zero: no session
	checkUntil   time.Time // zero: the check never passed
	proofAfter   time.Time // non-zero: invalid until a renewal sent after it succeeds
}

// sessionCreated starts the lease of a new session whose create request was
// sent at sent. Consul creates a session only while its checks pass.
func (l *lease) sessionCreated(sent time.Time) {
	l.sessionUntil = sent.Add(l.sessionTTL - l.margin)
	l.proofAfter = time.Time{}
}

// sessionRenewed records a successful renewal sent at sent.
func (l *lease) sessionRenewed(sent time.Time) {
	if l.sessionUntil.IsZero() {
		return
	}
	l.sessionUntil = later(l.sessionUntil, sent.Add(l.sessionTTL-l.margin))
	if sent.After(l.proofAfter) {
		l.proofAfter = time.Time{}
	}
}

// sessionLost forgets the session.
func (l *lease) sessionLost() {
	l.sessionUntil = time.Time{}
	l.proofAfter = time.Time{}
}

// checkPassed records a pass sent at sent whose response arrived at done,
// and reports whether it revoked a valid lease (a gap was found).
func (l *lease) checkPassed(sent, done time.Time) (revoked bool) {
	gap := l.checkUntil.IsZero() || !done.Before(l.checkUntil.Add(l.margin))
	l.checkUntil = later(l.checkUntil, sent.Add(l.checkTTL-l.margin))
	if gap {
		return l.requireProof(done)
	}
	return false
}

// checkRegistered records a registration (check created passing) sent at
// sent and answered at done. Registering again may have replaced a check
// the session was linked to, so it needs the same proof as a gap.
func (l *lease) checkRegistered(sent, done time.Time) (revoked bool) {
	l.checkUntil = later(l.checkUntil, sent.Add(l.checkTTL-l.margin))
	return l.requireProof(done)
}

func (l *lease) requireProof(at time.Time) (revoked bool) {
	if l.sessionUntil.IsZero() {
		return false
	}
	wasValid := l.proofAfter.IsZero()
	l.proofAfter = later(l.proofAfter, at)
	return wasValid
}

// deadline is when the lease ends if nothing is renewed; zero without a
// session.
func (l *lease) deadline() time.Time {
	if l.sessionUntil.IsZero() {
		return time.Time{}
	}
	if l.checkUntil.Before(l.sessionUntil) {
		return l.checkUntil
	}
	return l.sessionUntil
}

// valid reports whether the agent may act as leader at now.
func (l *lease) valid(now time.Time) bool {
	return !l.sessionUntil.IsZero() && l.proofAfter.IsZero() && now.Before(l.deadline())
}

// needsProof reports whether only a renewal can make the lease valid again.
func (l *lease) needsProof() bool { return !l.proofAfter.IsZero() }

// expire marks the lease lapsed if its deadline has passed, and reports
// whether that revoked a valid lease.
func (l *lease) expire(now time.Time) (revoked bool) {
	if l.sessionUntil.IsZero() || now.Before(l.deadline()) {
		return false
	}
	return l.requireProof(now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
