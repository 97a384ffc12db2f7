package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what a run did. Throughput is over Elapsed, from the first
// request's due time to the last answer, drain included.
type Result struct {
	// Workload is produce, consume or e2e.
	Workload string
	// Config holds the workload's settings, for the report.
	Config map[string]any
	// Elapsed runs from the start of the run to its last answer.
	Elapsed time.Duration
	// Requests counts successful requests only.
	Requests int64
	Records  int64
	// Bytes counts record keys, values and headers of successful requests.
	Bytes int64
	// Errors counts failed requests by ErrorKind; Examples holds the
	// first message of each kind.
	Errors   map[string]int64
	Examples map[string]string
	// Latency is the latency of successful requests (see the package
	// documentation for what it spans in each workload).
	Latency Histogram
	// EndToEnd is the produce-to-consume latency of each record (e2e).
	EndToEnd *Histogram
	// NotConsumed is how many fewer of the run's records the consumers
	// read than were acknowledged, by the end of the drain (e2e).
	NotConsumed int64
}

func (r *Result) merge(s *workerStats) {
	r.Latency.Merge(&s.latency)
	r.Requests += s.requests
	r.Records += s.records
	r.Bytes += s.bytes
	for kind, n := range s.errors {
		r.addErrors(kind, n, s.examples[kind])
	}
}

func (r *Result) addErrors(kind string, n int64, example string) {
	if r.Errors == nil {
		r.Errors, r.Examples = map[string]int64{}, map[string]string{}
	}
	r.Errors[kind] += n
	if _, ok := r.Examples[kind]; !ok {
		r.Examples[kind] = example
	}
}

// ErrorCount is the number of failed requests.
func (r *Result) ErrorCount() int64 {
	var n int64
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// ErrorRatio is failed requests over all requests, 0 when there were none.
func (r *Result) ErrorRatio() float64 {
	failed := r.ErrorCount()
	if failed == 0 {
		return 0
	}
	return float64(failed) / float64(failed+r.Requests)
}

// RequestsPerSecond is the successful requests over Elapsed.
func (r *Result) RequestsPerSecond() float64 { return perSecond(float64(r.Requests), r.Elapsed) }

// RecordsPerSecond is the records of successful requests over Elapsed.
func (r *Result) RecordsPerSecond() float64 { return perSecond(float64(r.Records), r.Elapsed) }

// MBPerSecond is Bytes over Elapsed, in megabytes (10^6 bytes) per second.
func (r *Result) MBPerSecond() float64 { return perSecond(float64(r.Bytes)/1e6, r.Elapsed) }

func perSecond(v float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return v / d.Seconds()
}

// LatencySummary is a histogram's summary in microseconds, as in the JSON
// report.
type LatencySummary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

// Summarize returns h's count, mean, p50, p90, p99, p99.9 and max.
func Summarize(h *Histogram) LatencySummary {
	return LatencySummary{
		Count: h.Count(),
		Mean:  micros(h.Mean()),
		P50:   micros(h.Quantile(0.50)),
		P90:   micros(h.Quantile(0.90)),
		P99:   micros(h.Quantile(0.99)),
		P999:  micros(h.Quantile(0.999)),
		Max:   micros(h.Max()),
	}
}

// micros is d in microseconds, to a tenth.
func micros(d time.Duration) float64 { return math.Round(float64(d)/100) / 10 }

// jsonReport is the shape of WriteJSON's output.
type jsonReport struct {
	Workload          string            `json:"workload"`
	Config            map[string]any    `json:"config"`
	ElapsedSeconds    float64           `json:"elapsed_seconds"`
	Requests          int64             `json:"requests"`
	Records           int64             `json:"records"`
	Bytes             int64             `json:"bytes"`
	RequestsPerSecond float64           `json:"requests_per_second"`
	RecordsPerSecond  float64           `json:"records_per_second"`
	MBPerSecond       float64           `json:"mb_per_second"`
	ErrorCount        int64             `json:"error_count"`
	ErrorRatio        float64           `json:"error_ratio"`
	Errors            map[string]int64  `json:"errors"`
	ErrorExamples     map[string]string `json:"error_examples,omitempty"`
	LatencyMicros     LatencySummary    `json:"latency_us"`
	EndToEndMicros    *LatencySummary   `json:"end_to_end_latency_us,omitempty"`
	NotConsumed       *int64            `json:"not_consumed,omitempty"`
}

// WriteJSON writes the result as one JSON object:
//
//	{"workload":"produce","config":{...},"elapsed_seconds":10.02,
//	 "requests":9990,"records":999000,"bytes":1022976000,
//	 "requests_per_second":997.0,"records_per_second":99700.6,"mb_per_second":102.1,
//	 "error_count":0,"error_ratio":0,"errors":{},
//	 "latency_us":{"count":9990,"mean":812.3,"p50":640.5,"p90":1210,
//	               "p99":3020.1,"p99_9":8190.7,"max":10230},
//	 "end_to_end_latency_us":{...},"not_consumed":0}      (e2e only)
//
// Latencies are in microseconds; megabytes are 10^6 bytes.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.report())
}

// report is the result in WriteJSON's shape.
func (r *Result) report() jsonReport {
	rep := jsonReport{
		Workload:          r.Workload,
		Config:            r.Config,
		ElapsedSeconds:    math.Round(r.Elapsed.Seconds()*1000) / 1000,
		Requests:          r.Requests,
		Records:           r.Records,
		Bytes:             r.Bytes,
		RequestsPerSecond: math.Round(r.RequestsPerSecond()*10) / 10,
		RecordsPerSecond:  math.Round(r.RecordsPerSecond()*10) / 10,
		MBPerSecond:       math.Round(r.MBPerSecond()*100) / 100,
		ErrorCount:        r.ErrorCount(),
		ErrorRatio:        r.ErrorRatio(),
		Errors:            r.Errors,
		ErrorExamples:     r.Examples,
		LatencyMicros:     Summarize(&r.Latency),
	}
	if rep.Errors == nil {
		rep.Errors = map[string]int64{}
	}
	if r.EndToEnd != nil {
		s := Summarize(r.EndToEnd)
		rep.EndToEndMicros = &s
		rep.NotConsumed = &r.NotConsumed
	}
	return rep
}

// WriteTable writes the result for people:
//
//	workload    produce   (acks=all concurrency=4 ...)
//	elapsed     10.02s
//	requests    9990 ok, 0 failed
//	records     999000    99700.6 records/s
//	bytes       1.02 GB   102.10 MB/s
//
//	latency     count  mean     p50      p90      p99      p99.9    max
//	request     9990   812µs    640µs    1.21ms   3.02ms   8.19ms   10.2ms
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%s\t%s\n", r.Workload, configLine(r.Config))
	fmt.Fprintf(tw, "elapsed\t%s\t\n", r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "requests\t%d ok, %d failed\t%s\n", r.Requests, r.ErrorCount(), errorLine(r.Errors))
	fmt.Fprintf(tw, "records\t%d\t%.1f records/s\n", r.Records, r.RecordsPerSecond())
	fmt.Fprintf(tw, "bytes\t%.2f MB\t%.2f MB/s\n", float64(r.Bytes)/1e6, r.MBPerSecond())
	if r.EndToEnd != nil {
		fmt.Fprintf(tw, "not consumed\t%d\t\n", r.NotConsumed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "latency\tcount\tmean\tp50\tp90\tp99\tp99.9\tmax")
	writeLatencyRow(tw, latencyName(r.Workload), &r.Latency)
	if r.EndToEnd != nil {
		writeLatencyRow(tw, "end-to-end", r.EndToEnd)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, kind := range slices.Sorted(maps.Keys(r.Examples)) {
		fmt.Fprintf(w, "first %s error: %s\n", kind, r.Examples[kind])
	}
	return nil
}

func latencyName(workload string) string {
	if workload == "consume" {
		return "fetch"
	}
	return "request"
}

func writeLatencyRow(w io.Writer, name string, h *Histogram) {
	fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", name, h.Count(), roundDuration(h.Mean()),
		roundDuration(h.Quantile(0.5)), roundDuration(h.Quantile(0.9)), roundDuration(h.Quantile(0.99)),
		roundDuration(h.Quantile(0.999)), roundDuration(h.Max()))
}

// roundDuration keeps three significant digits, which is all the histogram
// holds.
func roundDuration(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}

func configLine(config map[string]any) string {
	if len(config) == 0 {
		return ""
	}
	parts := make([]string, 0, len(config))
	for _, k := range slices.Sorted(maps.Keys(config)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, config[k]))
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func errorLine(errs map[string]int64) string {
	if len(errs) == 0 {
		return ""
	}
	parts := make([]string, 0, len(errs))
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, errs[k]))
	}
	return strings.Join(parts, " ")
}

// ProgressPrinter returns a Plan.Progress that rewrites one line of w (a
// terminal) with the totals and the rates since the previous call, and a
// clear function that blanks that line before the report is printed.
func ProgressPrinter(w io.Writer) (progress func(Progress), clear func()) {
	var prev Progress
	width := 0
	progress = func(p Progress) {
		dt := (p.Elapsed - prev.Elapsed).Seconds()
		if dt <= 0 {
			return
		}
		line := fmt.Sprintf("%6s  %d requests  %.0f records/s  %.2f MB/s  %d errors",
			p.Elapsed.Round(time.Second), p.Requests, float64(p.Records-prev.Records)/dt,
			float64(p.Bytes-prev.Bytes)/1e6/dt, p.Errors)
		fmt.Fprintf(w, "\r%-*s", width, line)
		width = max(width, len(line))
		prev = p
	}
	clear = func() {
		if width > 0 {
			fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
		}
	}
	return progress, clear
}
