package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets, HDR style: values below
// 128 ns each have their own bucket, and above that every power of two is
// split into 128 equal buckets, so a bucket is never wider than 1/128 of
// its smallest value. A quantile is the middle of the bucket that holds it,
// within 0.4 % of the exact value, from a nanosecond to about 73 minutes
// (2^42 ns); longer values share the last bucket, and only Max stays exact
// for them. Min, Max, Count and Mean are exact.
//
//	value v (ns)      bucket index             width
//	[0, 128)          v                        1 ns
//	[2^k, 2^(k+1))    (k-7)·128 + v>>(k-7)     2^(k-7) ns, for k = 7..41
//
// The zero value is an empty histogram. A Histogram is not safe for
// concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts []int64 // allocated at the first Record or Merge
	count  int64
	sum    int64 // ns; 292 years fit
	min    int64
	max    int64
}

const (
	subBucketBits   = 7
	subBucketCount  = 1 << subBucketBits
	trackableBits   = 42
	histogramLength = subBucketCount + (trackableBits-subBucketBits)*subBucketCount
)

// bucketIndex is the bucket of v, which is not negative.
func bucketIndex(v int64) int {
	if v < subBucketCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBucketBits - 1
	return min(shift*subBucketCount+int(v>>shift), histogramLength-1)
}

// bucketRange is the smallest value of bucket i and its width.
func bucketRange(i int) (lowest, width int64) {
	if i < subBucketCount {
		return int64(i), 1
	}
	shift := i/subBucketCount - 1
	top := int64(i - shift*subBucketCount)
	return top << shift, 1 << shift
}

// Record adds one duration; a negative one counts as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	if h.counts == nil {
		h.counts = make([]int64, histogramLength)
	}
	h.counts[bucketIndex(v)]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.count++
	h.sum += v
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.count == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]int64, histogramLength)
	}
	for i, n := range o.counts {
		h.counts[i] += n
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.count }

// Min is the smallest value, 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest value, 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact average, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / h.count)
}

// Quantile is the value at quantile q in [0, 1] (0.99 for p99): the
// ceil(q·Count)-th smallest value, to within the bucket precision and never
// outside [Min, Max]. Quantile(1) is Max. It is 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := max(int64(math.Ceil(q*float64(h.count))), 1)
	var seen int64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			lowest, width := bucketRange(i)
			return time.Duration(min(max(lowest+(width-1)/2, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
