// Command promconfig reads Prometheus configuration files with Prometheus' own loader (the config package of
// github.com/prometheus/prometheus, what `prometheus --config.file` and `promtool check config` use), so a test
// proves the prometheus.yml the stack renders is one Prometheus accepts.
//
//	promconfig FILE...   # per file "FILE: N scrape configs: job,..." or the loader's error; exit 1 on any error
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/prometheus/config"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: promconfig FILE...")
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	failed := false
	for _, path := range os.Args[1:] {
		loaded, err := config.LoadFile(path, false, logger)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		jobs := []string{}
		for _, scrape := range loaded.ScrapeConfigs {
			jobs = append(jobs, scrape.JobName+"="+scrape.MetricsPath)
		}
		fmt.Printf("%s: %d scrape configs: %s\n", path, len(jobs), strings.Join(jobs, ","))
	}
	if failed {
		os.Exit(1)
	}
}
