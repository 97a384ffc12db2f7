package election

import (
	"testing"
	"time"
)

func TestLease(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	newLease := func() *lease {
		return &lease{sessionTTL: 10 * time.Second, checkTTL: 3 * time.Second, margin: 500 * time.Millisecond}
	}
	type step struct {
		name      string
		do        func(l *lease) bool // returns revoked where meaningful
		revoked   bool
		validAt   int // ms
		wantValid bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "no session is never valid",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 10},
			},
		},
		{
			name: "check bounds the lease before the session ttl",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(2)); return false }, validAt: 2499, wantValid: true},
				{name: "check deadline 3s-0.5s", do: func(*lease) bool { return false }, validAt: 2500},
			},
		},
		{
			name: "passes every second keep it valid up to the session deadline",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 100, wantValid: true},
				{name: "pass 1s", do: func(l *lease) bool { return l.checkPassed(at(1000), at(1002)) }, validAt: 3000, wantValid: true},
				{name: "pass 2s", do: func(l *lease) bool { return l.checkPassed(at(2000), at(2002)) }, validAt: 4000, wantValid: true},
				{name: "pass 8s keeps the chain", do: func(l *lease) bool {
					for ms := 3000; ms <= 9000; ms += 1000 {
						if l.checkPassed(at(ms), at(ms+2)) {
							return true
						}
					}
					return false
				}, validAt: 9400, wantValid: true},
				{name: "session deadline 10s-0.5s", do: func(*lease) bool { return false }, validAt: 9500},
			},
		},
		{
			name: "renewal moves the session deadline",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 1, wantValid: true},
				{name: "renewed at 5s", do: func(l *lease) bool { l.sessionRenewed(at(5000)); return false }, validAt: 1, wantValid: true},
				{name: "passes to 12s", do: func(l *lease) bool {
					for ms := 1000; ms <= 12000; ms += 1000 {
						l.checkPassed(at(ms), at(ms+1))
					}
					return false
				}, validAt: 14000, wantValid: true},
				{name: "session deadline 15s-0.5s", do: func(*lease) bool { return false }, validAt: 14500},
			},
		},
		{
			name: "a lapsed lease is not revived by a pass alone",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 1, wantValid: true},
				{name: "expire at 2.5s", do: func(l *lease) bool { return l.expire(at(2500)) }, revoked: true, validAt: 2500},
				{name: "expire again is no news", do: func(l *lease) bool { return l.expire(at(2600)) }, validAt: 2600},
				{name: "pass after the gap", do: func(l *lease) bool { return l.checkPassed(at(4000), at(4001)) }, validAt: 4002},
				{name: "renewal sent before the pass completed is no proof", do: func(l *lease) bool {
					l.sessionRenewed(at(3999))
					return false
				}, validAt: 4002},
				{name: "renewal sent after is proof", do: func(l *lease) bool { l.sessionRenewed(at(4002)); return false }, validAt: 4003, wantValid: true},
			},
		},
		{
			name: "a pass completing after the previous guarantee is a gap",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 1, wantValid: true},
				// Sent at 1s but answered at 3.2s, after the check could
				// have gone critical (0 + 3s): the session may be gone.
				{name: "slow pass", do: func(l *lease) bool { return l.checkPassed(at(1000), at(3200)) }, revoked: true, validAt: 3201},
				{name: "renewal proves the session", do: func(l *lease) bool { l.sessionRenewed(at(3300)); return false }, validAt: 3301, wantValid: true},
			},
		},
		{
			name: "registering again needs proof",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 1, wantValid: true},
				{name: "registered again", do: func(l *lease) bool { return l.checkRegistered(at(1000), at(1001)) }, revoked: true, validAt: 1002},
				{name: "renewal", do: func(l *lease) bool { l.sessionRenewed(at(1002)); return false }, validAt: 1003, wantValid: true},
			},
		},
		{
			name: "a new session clears a lapse",
			steps: []step{
				{name: "registered", do: func(l *lease) bool { return l.checkRegistered(at(0), at(1)) }, validAt: 1},
				{name: "session", do: func(l *lease) bool { l.sessionCreated(at(0)); return false }, validAt: 1, wantValid: true},
				{name: "expire", do: func(l *lease) bool { return l.expire(at(2600)) }, revoked: true, validAt: 2600},
				{name: "lost", do: func(l *lease) bool { l.sessionLost(); return false }, validAt: 2600},
				{name: "pass", do: func(l *lease) bool { return l.checkPassed(at(3000), at(3001)) }, validAt: 3001},
				{name: "created", do: func(l *lease) bool { l.sessionCreated(at(3002)); return false }, validAt: 3003, wantValid: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLease()
			for _, s := range tt.steps {
				if got := s.do(l); got != s.revoked {
					t.Fatalf("%s: revoked = %v, want %v (lease %+v)", s.name, got, s.revoked, *l)
				}
				if got := l.valid(at(s.validAt)); got != s.wantValid {
					t.Fatalf("%s: valid at %dms = %v, want %v (lease %+v)", s.name, s.validAt, got, s.wantValid, *l)
				}
			}
		})
	}
}
