//go:build race

package program

func init() { raceEnabled = true }
