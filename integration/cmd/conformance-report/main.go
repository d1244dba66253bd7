// Command conformance-report summarizes a ginkgo JSON report of
// Kubernetes' e2e suite (make conformance): how many of the focused specs
// passed, failed and were skipped, and which failed or were skipped, with
// why.
//
//	conformance-report -focus '\[Conformance\]' report.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// suiteReport is the part of ginkgo's types.Report the summary reads.
type suiteReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		RunTime                 time.Duration
		Failure                 struct {
			Message string
		}
	}
}

func main() {
	focus := flag.String("focus", `\[Conformance\]`, "count only the specs whose full name matches")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: conformance-report [-focus REGEXP] REPORT.json")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *focus); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-report:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, path, focus string) error {
	re, err := regexp.Compile(focus)
	if err != nil {
		return fmt.Errorf("-focus: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var suites []suiteReport
	if err := json.Unmarshal(data, &suites); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	count := map[string]int{}
	lists := map[string][]string{}
	var total time.Duration
	for _, s := range suites {
		for _, r := range s.SpecReports {
			if r.LeafNodeType != "It" {
				continue
			}
			name := strings.TrimSpace(strings.Join(append(append([]string{}, r.ContainerHierarchyTexts...), r.LeafNodeText), " "))
			if !re.MatchString(name) {
				continue
			}
			state := r.State
			if strings.HasPrefix(state, "failed") || state == "panicked" || state == "timedout" || state == "interrupted" || state == "aborted" {
				state = "failed"
			}
			count[state]++
			total += r.RunTime
			switch state {
			case "failed":
				lists[state] = append(lists[state], name+"\n    "+firstLine(r.Failure.Message))
			case "skipped", "pending":
				why := firstLine(r.Failure.Message)
				if why == "" {
					why = "not selected (-skip or not focused)"
				}
				lists["skipped"] = append(lists["skipped"], name+"\n    "+why)
			}
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%s of specs)\n", count["passed"], count["failed"], count["skipped"]+count["pending"], total.Round(time.Second))
	for _, state := range []string{"failed", "skipped"} {
		sort.Strings(lists[state])
		if len(lists[state]) > 0 {
			fmt.Fprintf(w, "\n%s:\n", state)
		}
		for _, l := range lists[state] {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
