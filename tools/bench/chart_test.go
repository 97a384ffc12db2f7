package main

import (
	"bytes"
	"image/png"
	"testing"
	"time"
)

func TestDrawChartIsAPNGOfTheExpectedSize(t *testing.T) {
	rows := []comparison{
		{Group: "produce-r3", Name: "met", TheirsName: "JetStream R3", Metric: byRecords, Goal: 1.5, Ours: sample{RecordsPerSec: 3}, Theirs: sample{RecordsPerSec: 1}},
		{Group: "e2e", Name: "missed", TheirsName: "JetStream R3", Metric: byP99, Goal: 1, Ours: sample{P99: 2 * time.Millisecond}, Theirs: sample{P99: time.Millisecond}},
		{Group: "limits", Name: "no goal", TheirsName: "file write", Metric: byMB, Ours: sample{MBPerSec: 1}, Theirs: sample{MBPerSec: 4}},
		{Group: "consume", Name: "not measured, left out", TheirsName: "JetStream R3", Metric: byMB, Goal: 5, Ours: sample{MBPerSec: 1}},
	}
	var buf bytes.Buffer
	if err := drawChart(&buf, rows); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	want := chartSize(3)
	if got := img.Bounds().Size(); got != want {
		t.Errorf("size %v, want %v (3 rows with a ratio)", got, want)
	}
	if want.Y <= chartSize(2).Y {
		t.Errorf("chart does not grow with rows: %v for 3, %v for 2", want, chartSize(2))
	}
	// The first row's bar (met) must be green somewhere along its middle.
	y := chartMargin + chartTitleH + chartRowH/2
	found := false
	for x := chartMargin + chartLabelW + 2; x < chartWidth-chartMargin-chartValueW; x++ {
		if r, g, b, _ := img.At(x, y).RGBA(); r>>8 == uint32(colorMet.R) && g>>8 == uint32(colorMet.G) && b>>8 == uint32(colorMet.B) {
			found = true
			break
		}
	}
	if !found {
		t.Error("no green bar in the row whose goal is met")
	}
}

func TestDrawChartWithoutRows(t *testing.T) {
	var buf bytes.Buffer
	if err := drawChart(&buf, nil); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if got, want := img.Bounds().Size(), chartSize(0); got != want {
		t.Errorf("size %v, want %v", got, want)
	}
}
