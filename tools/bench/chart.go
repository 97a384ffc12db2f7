package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: one horizontal bar per row with a ratio, its length the ratio
// on a linear scale from 0 to the largest ratio or goal (at least 2x), a
// black line at 1x, and a dark tick at the row's goal. Bars are green when
// the goal is met, red when missed, grey when the row has no goal.
//
//	+--------------------------------------------------------------+
//	| logagent / other side (ratio), goal ticks                    |
//	| produce-r3  RF3 1 KiB   |█████████████|    2.10x             |
//	| e2e         p99 ...     |██████   |        0.80x             |
//	+--------------------------------------------------------------+
const (
	chartWidth   = 960
	chartMargin  = 12
	chartTitleH  = 30
	chartRowH    = 24
	chartLabelW  = 420
	chartValueW  = 70
	chartBarPadY = 5
)

var (
	colorMet     = color.RGBA{0x2e, 0x9e, 0x44, 0xff}
	colorMissed  = color.RGBA{0xd0, 0x3a, 0x2f, 0xff}
	colorNoGoal  = color.RGBA{0x90, 0x90, 0x90, 0xff}
	colorAxis    = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colorGoal    = color.RGBA{0x10, 0x10, 0x60, 0xff}
	colorText    = color.RGBA{0x10, 0x10, 0x10, 0xff}
	colorStripe  = color.RGBA{0xf2, 0xf2, 0xf2, 0xff}
	colorBackgnd = color.White
)

// chartRows keeps the rows that have a ratio.
func chartRows(rows []comparison) []comparison {
	var out []comparison
	for _, r := range rows {
		if _, ok := r.ratio(); ok {
			out = append(out, r)
		}
	}
	return out
}

// chartSize is the image size drawChart makes for n rows.
func chartSize(n int) image.Point {
	return image.Pt(chartWidth, 2*chartMargin+chartTitleH+max(n, 1)*chartRowH)
}

// drawChart writes the rows' ratios as a PNG bar chart.
func drawChart(w io.Writer, rows []comparison) error {
	rows = chartRows(rows)
	size := chartSize(len(rows))
	img := image.NewRGBA(image.Rectangle{Max: size})
	draw.Draw(img, img.Bounds(), image.NewUniform(colorBackgnd), image.Point{}, draw.Src)
	face := basicfont.Face7x13
	label(img, face, chartMargin, chartMargin+16, "logagent vs other side: ratio per row (green met, red missed, grey no goal; tick = goal, black line = 1x)")

	scale := 2.0
	for _, r := range rows {
		v, _ := r.ratio()
		scale = math.Max(scale, math.Max(v, r.Goal)*1.05)
	}
	barLeft := chartMargin + chartLabelW
	barSpan := chartWidth - chartMargin - chartValueW - barLeft
	x := func(v float64) int { return barLeft + int(math.Round(v/scale*float64(barSpan))) }

	for i, r := range rows {
		top := chartMargin + chartTitleH + i*chartRowH
		if i%2 == 0 {
			fill(img, image.Rect(chartMargin, top, chartWidth-chartMargin, top+chartRowH), colorStripe)
		}
		v, _ := r.ratio()
		barColor := colorNoGoal
		switch r.verdict() {
		case "met":
			barColor = colorMet
		case "missed":
			barColor = colorMissed
		}
		fill(img, image.Rect(barLeft, top+chartBarPadY, max(x(v), barLeft+1), top+chartRowH-chartBarPadY), barColor)
		if r.Goal > 0 {
			gx := x(r.Goal)
			fill(img, image.Rect(gx-1, top+1, gx+2, top+chartRowH-1), colorGoal)
		}
		text := fmt.Sprintf("%s: %s", r.Group, r.Name)
		if len(text) > chartLabelW/7-1 {
			text = text[:chartLabelW/7-4] + "..."
		}
		label(img, face, chartMargin+4, top+chartRowH-7, text)
		label(img, face, chartWidth-chartMargin-chartValueW+6, top+chartRowH-7, r.ratioText())
	}
	oneX := x(1)
	fill(img, image.Rect(oneX, chartMargin+chartTitleH, oneX+1, size.Y-chartMargin), colorAxis)
	fill(img, image.Rect(barLeft, chartMargin+chartTitleH, barLeft+1, size.Y-chartMargin), colorAxis)
	return png.Encode(w, img)
}

func fill(img draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func label(img draw.Image, face font.Face, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(colorText), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
