package reassign

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

// TestThrottleHoldsTheRate sends answers as fast as the bucket lets them go
// for a simulated minute, with answer sizes from small to one larger than
// the window, and checks the bytes per second.
func TestThrottleHoldsTheRate(t *testing.T) {
	cases := []struct {
		name   string
		rate   int64
		answer int64 // bytes a fetch would return uncapped
		rtt    time.Duration
	}{
		{"small answers", 1 << 20, 16 << 10, time.Millisecond},
		{"answers capped by the window", 1 << 20, 8 << 20, time.Millisecond},
		{"slow fetches", 50 << 20, 1 << 20, 5 * time.Millisecond},
		{"a batch above the window", 100 << 10, 64 << 10, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := t0
			th := NewThrottle(c.rate, now)
			end := t0.Add(time.Minute)
			var sent int64
			for now.Before(end) {
				now = now.Add(th.Delay(now))
				n := min(c.answer, th.MaxBytes(c.answer))
				if c.name == "a batch above the window" {
					n = c.answer // a whole batch goes out even above the cap
				}
				th.Spend(now, int(n))
				sent += n
				now = now.Add(c.rtt)
			}
			// At most the rate, plus the window saved at the start and the
			// one answer that may go into debt at the end.
			elapsed := now.Sub(t0).Seconds()
			bound := float64(c.rate)*elapsed + float64(c.rate)/4 + float64(c.answer)
			if got := float64(sent) / elapsed; float64(sent) > bound || got < float64(c.rate)*0.95 {
				t.Fatalf("%.0f bytes/s (%d bytes in %.1fs), want %d: at most %.0f bytes, at least 95%% of the rate", got, sent, elapsed, c.rate, bound)
			}
		})
	}
}

func TestThrottle(t *testing.T) {
	unlimited := NewThrottle(0, t0)
	if unlimited != nil || unlimited.Delay(t0) != 0 || unlimited.MaxBytes(123) != 123 {
		t.Fatalf("rate 0 is unlimited: %+v", unlimited)
	}
	unlimited.Spend(t0, 1<<30) // a nil bucket takes anything
	th := NewThrottle(1000, t0)
	if got := th.MaxBytes(1 << 20); got != 250 {
		t.Fatalf("MaxBytes = %d, want a quarter second: 250", got)
	}
	if got := th.MaxBytes(100); got != 100 {
		t.Fatalf("MaxBytes(100) = %d", got)
	}
	th.Spend(t0, 750) // 250 saved, 500 in debt
	if d := th.Delay(t0); d != 500*time.Millisecond {
		t.Fatalf("Delay in debt of 500 at 1000/s = %s", d)
	}
	if d := th.Delay(t0.Add(-time.Second)); d != 500*time.Millisecond {
		t.Fatalf("time going backwards earned something: delay %s", d)
	}
	if d := th.Delay(t0.Add(500 * time.Millisecond)); d != 0 {
		t.Fatalf("Delay once paid = %s", d)
	}
	// Idle time saves up one window at most.
	if th.Delay(t0.Add(time.Hour)); th.tokens != 250 {
		t.Fatalf("tokens after an hour idle = %f, want 250", th.tokens)
	}
}
