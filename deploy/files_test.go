package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/smppproxy/smppproxy/config"
)

const (
	dashboardFile = "grafana/smppproxy.json"
	alertsFile    = "prometheus/alerts.yml"
	rulesTestFile = "prometheus/rules_test.yml"
	unitFile      = "systemd/smppproxy.service"
	dockerfile    = "Dockerfile"
)

// query is one PromQL expression of a file and where it is.
type query struct {
	where, expr string
}

// panel is the part of a Grafana panel the tests read.
type panel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *datasourceRef     `json:"datasource"`
	GridPos    struct{ X, W int } `json:"gridPos"`
	Targets    []struct {
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboard struct {
	UID        string `json:"uid"`
	ID         *int   `json:"id"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the variables' queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	d := readDashboard(t)
	var out []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, query{fmt.Sprintf("%s panel %q", dashboardFile, p.Title), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("%s variable %s: query is neither an object nor a string", dashboardFile, v.Name)
			}
			q.Query = s
		}
		out = append(out, query{fmt.Sprintf("%s variable %q", dashboardFile, v.Name), q.Query})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no queries found", dashboardFile)
	}
	return out
}

// rule is one alerting rule of alerts.yml.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", alertsFile)
	}
	return out
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, r := range readRules(t) {
		out = append(out, query{fmt.Sprintf("%s alert %s", alertsFile, r.Alert), r.Expr})
	}
	return out
}

// The dashboard imports anywhere: no fixed id, its own uid, the Prometheus
// data source chosen by a variable that every panel and target uses, and
// panels that fit the 24-column grid with distinct ids.
func TestDashboardIsImportableWithADataSourceVariable(t *testing.T) {
	d := readDashboard(t)
	if d.ID != nil || d.UID == "" || d.Title == "" {
		t.Errorf("dashboard id = %v, uid = %q, title = %q; want id null, a uid and a title", d.ID, d.UID, d.Title)
	}
	var hasVar bool
	for _, v := range d.Templating.List {
		var q string
		_ = json.Unmarshal(v.Query, &q)
		if v.Name == "datasource" && v.Type == "datasource" && q == "prometheus" {
			hasVar = true
		}
		if v.Datasource != nil && v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s uses data source %q, want ${datasource}", v.Name, v.Datasource.UID)
		}
	}
	if !hasVar {
		t.Error(`no variable {"name": "datasource", "type": "datasource", "query": "prometheus"}`)
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos x=%d w=%d leaves the 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a target's datasource is %+v, want uid ${datasource}", p.Title, tg.Datasource)
			}
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s does not filter on $instance", p.Title, tg.Expr)
			}
		}
	}
}

// Every alert has a severity, a summary and a description, and
// rules_test.yml has an evaluation where it fires and one where it does
// not.
func TestEveryAlertIsTestedFiringAndNotFiring(t *testing.T) {
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Contains(f.RuleFiles, filepath.Base(alertsFile)) {
		t.Errorf("%s tests %v, want %s", rulesTestFile, f.RuleFiles, filepath.Base(alertsFile))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range readRules(t) {
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: want a summary and a description", r.Alert)
		}
		if !fires[r.Alert] || !quiet[r.Alert] {
			t.Errorf("alert %s: %s has a firing evaluation: %v, a quiet one: %v; want both", r.Alert, rulesTestFile, fires[r.Alert], quiet[r.Alert])
		}
	}
}

// The dashboard's expressions are valid PromQL (promtool parses them as
// recording rules, Grafana's variables replaced). CI installs promtool;
// elsewhere the test is skipped.
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); .ci/run installs it")
	}
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rec
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	for i, q := range dashboardQueries(t) {
		if labelValuesQ.MatchString(q.expr) {
			continue // Grafana's function, not PromQL
		}
		rules = append(rules, rec{Record: "dashboard_query_" + strconv.Itoa(i), Expr: vars.Replace(q.expr)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

// exampleConfigs loads every example configuration.
func exampleConfigs(t *testing.T) map[string]*config.Config {
	t.Helper()
	paths, err := filepath.Glob("config/*.yaml")
	if err != nil || len(paths) < 2 {
		t.Fatalf("example configurations: %v, %v", paths, err)
	}
	out := map[string]*config.Config{}
	for _, p := range paths {
		cfg, err := config.Load(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		out[p] = cfg
	}
	return out
}

// The example configurations load, the PostgreSQL one says it needs that
// backend, and their listening ports collide neither with each other nor
// with the simulator's defaults (2776 SMPP, 2777 stats).
func TestExampleConfigsLoadWithDistinctPorts(t *testing.T) {
	cfgs := exampleConfigs(t)
	if c := cfgs["config/single-node.yaml"]; c == nil || c.Store.Backend != config.BackendBadger {
		t.Errorf("config/single-node.yaml: want a loadable configuration on the badger store")
	}
	pg := cfgs["config/several-nodes-postgres.yaml"]
	if pg == nil || pg.Store.Backend != config.BackendPostgres {
		t.Errorf("config/several-nodes-postgres.yaml: want a loadable configuration on the postgres store")
	}
	if b, _ := os.ReadFile("config/several-nodes-postgres.yaml"); !strings.Contains(string(b), "NEEDS THE POSTGRESQL STORE BACKEND") {
		t.Error("config/several-nodes-postgres.yaml must say at the top that it NEEDS THE POSTGRESQL STORE BACKEND")
	}
	used := map[string]string{"2776": "the simulator's SMPP port", "2777": "the simulator's stats port"}
	for path, c := range cfgs {
		addrs := map[string]string{"listen.address": c.Listen.Address, "admin.address": c.Admin.Address}
		if c.Listen.TLS != nil {
			addrs["listen.tls.address"] = c.Listen.TLS.Address
		}
		for key, addr := range addrs {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("%s %s %q: %v", path, key, addr, err)
				continue
			}
			if prev, dup := used[port]; dup {
				t.Errorf("%s %s uses port %s, already %s", path, key, port, prev)
			}
			used[port] = path + " " + key
		}
	}
}

var (
	timeoutStop = regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`)
	exposeLine  = regexp.MustCompile(`(?m)^EXPOSE\s+(.+)$`)
)

// systemd stops the proxy with SIGKILL only after it had the time to drain
// (shutdown_timeout) and to give up by itself (at 2 × shutdown_timeout +
// 1s), for every example configuration; and the image exposes the ports of
// the single-node example it is documented with.
func TestUnitAndImageAgreeWithTheExamples(t *testing.T) {
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "StateDirectory=smppproxy", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure"} {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("%s lacks the line %s", unitFile, want)
		}
	}
	m := timeoutStop.FindStringSubmatch(string(unit))
	if m == nil {
		t.Fatalf("%s: no TimeoutStopSec=", unitFile)
	}
	stop, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec=%s: %v (write it as a Go duration, e.g. 60s)", unitFile, m[1], err)
	}
	cfgs := exampleConfigs(t)
	for path, c := range cfgs {
		if need := 2*c.ShutdownTimeout.Std() + time.Second; stop <= need {
			t.Errorf("%s TimeoutStopSec=%v, but %s drains for up to %v: want more", unitFile, stop, path, need)
		}
	}
	docker, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	e := exposeLine.FindStringSubmatch(string(docker))
	if e == nil {
		t.Fatalf("%s: no EXPOSE", dockerfile)
	}
	exposed := strings.Fields(e[1])
	single := cfgs["config/single-node.yaml"]
	if single == nil {
		t.Fatal("config/single-node.yaml did not load")
	}
	for _, addr := range []string{single.Listen.Address, single.Admin.Address} {
		_, port, _ := net.SplitHostPort(addr)
		if !slices.Contains(exposed, port) {
			t.Errorf("%s exposes %v, not %s of config/single-node.yaml", dockerfile, exposed, addr)
		}
	}
}
