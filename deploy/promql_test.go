package deploy_test

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// PromQL words that are not metric names: operators, modifiers and the
// special numbers.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true,
}

var (
	grafanaVar   = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	quoted       = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	braced       = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	grouping     = regexp.MustCompile(`(?i)\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	identifier   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValuesQ = regexp.MustCompile(`^\s*label_values\(\s*([^,]+),`)
)

// metricNames returns the metric names a PromQL expression selects (or
// the metric of a Grafana label_values(metric, label) query), sorted. It
// is a lexer, not a parser: it drops Grafana variables, strings, label
// matchers, ranges and grouping clauses, then keeps the identifiers that
// are not keywords, functions (followed by "(") or parts of numbers and
// durations.
func metricNames(expr string) []string {
	if m := labelValuesQ.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	s := grafanaVar.ReplaceAllString(expr, "")
	s = quoted.ReplaceAllString(s, `""`)
	s = braced.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.") {
			continue // 1e3, 5m
		}
		if promqlKeywords[strings.ToLower(word)] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function
		}
		if !slices.Contains(out, word) {
			out = append(out, word)
		}
	}
	sort.Strings(out)
	return out
}

// The lexer finds the selected metrics and nothing else.
func TestMetricNamesFindsTheSelectedMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="smppproxy"} == 0`, []string{"up"}},
		{`sum by (instance, job) (smppproxy_upstream_sessions{state="bound"}) or sum by (instance, job) (smppproxy_upstream_in_flight) * 0`,
			[]string{"smppproxy_upstream_in_flight", "smppproxy_upstream_sessions"}},
		{`histogram_quantile(0.99, sum by (le, op) (rate(smppproxy_store_write_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`,
			[]string{"smppproxy_store_write_seconds_bucket"}},
		{`a_total unless a_total offset 5m > 1e3`, []string{"a_total"}},
		{`x / on(instance) group_left(version) smppproxy_build_info`, []string{"smppproxy_build_info", "x"}},
		{`min_over_time(smppproxy_store_lease_held[5m]) == 0`, []string{"smppproxy_store_lease_held"}},
		{`sum(rate(m{l="a(b) or c"}[5m])) or vector(0)`, []string{"m"}},
		{`time() - smppproxy_store_records_scan_timestamp_seconds > 900`, []string{"smppproxy_store_records_scan_timestamp_seconds"}},
		{`label_values(smppproxy_esme_connections, instance)`, []string{"smppproxy_esme_connections"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
