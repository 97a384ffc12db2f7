//go:build !race

package producer

const raceEnabled = false
