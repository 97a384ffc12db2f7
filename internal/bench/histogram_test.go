package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

func TestHistogramQuantilesMatchSortedReference(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	distributions := []struct {
		name string
		next func() time.Duration
	}{
		{"uniform 1µs-10ms", func() time.Duration { return time.Microsecond + time.Duration(rng.Int64N(int64(10*time.Millisecond))) }},
		{"log-uniform 1µs-1min", func() time.Duration {
			return time.Duration(math.Exp(math.Log(1e3) + rng.Float64()*(math.Log(60e9)-math.Log(1e3))))
		}},
		{"exponential mean 500µs", func() time.Duration { return time.Duration(rng.ExpFloat64() * 500e3) }},
		{"bimodal 100µs and 80ms", func() time.Duration {
			if rng.IntN(100) < 3 {
				return 80*time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
			}
			return 100*time.Microsecond + time.Duration(rng.Int64N(int64(10*time.Microsecond)))
		}},
		{"constant", func() time.Duration { return 1234567 }},
		{"below 128ns", func() time.Duration { return time.Duration(rng.Int64N(128)) }},
	}
	quantiles := []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1}
	for _, d := range distributions {
		t.Run(d.name, func(t *testing.T) {
			n := 1 + rng.IntN(30000)
			values := make([]time.Duration, n)
			var h Histogram
			var sum time.Duration
			for i := range values {
				values[i] = d.next()
				sum += values[i]
				h.Record(values[i])
			}
			slices.Sort(values)
			if h.Count() != int64(n) || h.Min() != values[0] || h.Max() != values[n-1] {
				t.Fatalf("count %d min %v max %v, want %d %v %v", h.Count(), h.Min(), h.Max(), n, values[0], values[n-1])
			}
			if h.Mean() != sum/time.Duration(n) {
				t.Errorf("mean %v, want %v", h.Mean(), sum/time.Duration(n))
			}
			for _, q := range quantiles {
				rank := max(int(math.Ceil(q*float64(n))), 1)
				want := values[rank-1]
				got := h.Quantile(q)
				if diff := math.Abs(float64(got - want)); diff > float64(want)*0.01 {
					t.Errorf("n=%d: quantile %v = %v, sorted reference %v: off by %.3f%%", n, q, got, want, 100*diff/float64(want))
				}
			}
		})
	}
}

func TestHistogramMergeEqualsOneHistogram(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	var whole Histogram
	parts := make([]Histogram, 4)
	for range 20000 {
		v := time.Duration(rng.ExpFloat64() * 2e6)
		whole.Record(v)
		parts[rng.IntN(len(parts))].Record(v)
	}
	var merged Histogram
	merged.Merge(&Histogram{}) // an empty one changes nothing
	merged.Merge(nil)
	for i := range parts {
		merged.Merge(&parts[i])
	}
	if merged.Count() != whole.Count() || merged.Min() != whole.Min() || merged.Max() != whole.Max() || merged.Mean() != whole.Mean() {
		t.Fatalf("merged count %d min %v max %v mean %v; whole %d %v %v %v", merged.Count(), merged.Min(), merged.Max(),
			merged.Mean(), whole.Count(), whole.Min(), whole.Max(), whole.Mean())
	}
	for q := 0.0; q <= 1; q += 0.001 {
		if merged.Quantile(q) != whole.Quantile(q) {
			t.Fatalf("quantile %v: merged %v, whole %v", q, merged.Quantile(q), whole.Quantile(q))
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	for i := range histogramLength {
		lowest, width := bucketRange(i)
		if got := bucketIndex(lowest); got != i {
			t.Fatalf("bucket %d starts at %d, which maps to bucket %d", i, lowest, got)
		}
		if got := bucketIndex(lowest + width - 1); got != i {
			t.Fatalf("bucket %d ends at %d, which maps to bucket %d", i, lowest+width-1, got)
		}
		if width > 1 && width*subBucketCount > lowest {
			t.Fatalf("bucket %d [%d, +%d) is wider than 1/%d of its values", i, lowest, width, subBucketCount)
		}
	}
	if lowest, width := bucketRange(histogramLength - 1); lowest+width != 1<<trackableBits {
		t.Fatalf("last bucket ends at %d, want 2^%d", lowest+width, trackableBits)
	}
}

func TestHistogramEdges(t *testing.T) {
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 || empty.Max() != 0 || empty.Count() != 0 {
		t.Errorf("empty histogram: p50 %v mean %v max %v count %d", empty.Quantile(0.5), empty.Mean(), empty.Max(), empty.Count())
	}

	var h Histogram
	h.Record(-time.Second)
	h.Record(2 * time.Hour) // beyond the tracked range: only Max stays exact
	if h.Min() != 0 || h.Max() != 2*time.Hour || h.Quantile(1) != 2*time.Hour || h.Quantile(0) != 0 {
		t.Errorf("min %v max %v p100 %v p0 %v", h.Min(), h.Max(), h.Quantile(1), h.Quantile(0))
	}
	if p := h.Quantile(0.99); p < 70*time.Minute || p > 2*time.Hour {
		t.Errorf("p99 of a saturated value is %v, want between the tracked limit and the max", p)
	}
}
