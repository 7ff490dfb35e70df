package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// callTimelines reads the server's "call timeline" log lines (debug level:
// -trace) and returns each job's marks, as milliseconds since its call's
// line arrived, by job id.
func callTimelines(logPath string) (map[string]map[string]float64, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Message  string `json:"message"`
			Timeline string `json:"timeline"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Message != "call timeline" {
			continue
		}
		marks, job := map[string]float64{}, ""
		for _, f := range strings.Fields(line.Timeline) {
			k, v, _ := strings.Cut(f, "=")
			if k == "job" {
				job = v
				continue
			}
			if ms, err := strconv.ParseFloat(v, 64); err == nil {
				marks[k] = ms
			}
		}
		if job != "" {
			out[job] = marks
		}
	}
	return out, sc.Err()
}

// timelineStep is one mark of the median call: its p50 time since the call
// arrived and the p50 of the step from the mark before it.
type timelineStep struct {
	mark      string
	at, delta float64
	n         int
}

// medianTimeline orders the marks of the given jobs' timelines by their
// median time, each with the median of its step from the previous mark
// (per call, so the steps' medians need not add up to the total's).
func medianTimeline(jobs []string, timelines map[string]map[string]float64) []timelineStep {
	at := map[string][]float64{}
	for _, j := range jobs {
		for k, v := range timelines[j] {
			at[k] = append(at[k], v)
		}
	}
	var steps []timelineStep
	for k, vs := range at {
		steps = append(steps, timelineStep{mark: k, at: median(vs), n: len(vs)})
	}
	slices.SortFunc(steps, func(a, b timelineStep) int {
		if a.at < b.at {
			return -1
		}
		if a.at > b.at {
			return 1
		}
		return strings.Compare(a.mark, b.mark)
	})
	for i := range steps {
		var ds []float64
		for _, j := range jobs {
			tl := timelines[j]
			cur, ok := tl[steps[i].mark]
			if !ok {
				continue
			}
			prev := 0.0
			for k := i - 1; k >= 0; k-- {
				if v, ok := tl[steps[k].mark]; ok {
					prev = v
					break
				}
			}
			ds = append(ds, cur-prev)
		}
		steps[i].delta = median(ds)
	}
	return steps
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// warmCol is a warm case as a column of the report.
type warmCol struct {
	name string
	wc   *warmCase
}

// printTimelines prints the median timeline of each warm case.
func printTimelines(timelines map[string]map[string]float64, cases []warmCol) {
	if timelines == nil {
		fmt.Printf("  call timelines: none read from the server's log\n")
		return
	}
	fmt.Printf("  the server's call timeline (marks in time order; p50 ms since the call's line arrived, and p50 of each step):\n")
	for _, c := range cases {
		steps := medianTimeline(c.wc.jobs, timelines)
		if len(steps) == 0 {
			fmt.Printf("  %-10s no timeline logged\n", c.name)
			continue
		}
		var b strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&b, "    %-18s %8.3f %+8.3f  (%d calls)\n", s.mark, s.at, s.delta, s.n)
		}
		fmt.Printf("  %s:\n%s", c.name, b.String())
	}
}
