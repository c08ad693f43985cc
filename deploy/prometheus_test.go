package deploy_test

// The Prometheus configuration (prometheus/prometheus.yml) and the alerting
// rules (prometheus/rules) are checked by promtool, and every rule file has
// unit tests (prometheus/tests) that promtool runs. Tests that pass whatever
// the rule says would prove nothing, so TestPrometheus_RuleTestsCatchWrongRules
// changes each alert, one thing at a time (a threshold doubled or halved, its
// `for` dropped or doubled, its expression made to match nothing), and
// requires the unit tests to fail on every change.
//
// promtool comes from Debian's prometheus package (.ci/run extracts it);
// without it these tests are skipped, except in CI (CI=true), where a
// missing tool must not pass as a green run.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// needTool returns the path of a command, skipping the test without it
// (failing it in CI).
func needTool(t *testing.T, name, install string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed, and CI must run this test: %s", name, install)
		}
		t.Skipf("%s is not installed (%s)", name, install)
	}
	return bin
}

func promtool(t *testing.T) string {
	return needTool(t, "promtool", "Debian's prometheus package has it; .ci/run extracts it")
}

func TestPrometheus_Config(t *testing.T) {
	bin := promtool(t)
	// check config also loads every rule file the configuration names.
	out, err := exec.Command(bin, "check", "config", "prometheus/prometheus.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("rules found")) {
		t.Fatalf("promtool check config loaded no rule file:\n%s", out)
	}
}

func TestPrometheus_Rules(t *testing.T) {
	bin := promtool(t)
	rules := mustGlob(t, "prometheus/rules/*.yml")
	tests := mustGlob(t, "prometheus/tests/*_test.yml")
	args := append([]string{"check", "rules", "--lint=all", "--lint-fatal"}, rules...)
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, append([]string{"test", "rules"}, tests...)...).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Every rule file has its test file, and every alert has a case that
// fires and a case that stays quiet.
func TestPrometheus_EveryAlertTested(t *testing.T) {
	for _, rf := range mustGlob(t, "prometheus/rules/*.yml") {
		tf := testFileOf(rf)
		tests := readRuleTests(t, tf)
		if !slices.Contains(tests.RuleFiles, "../rules/"+filepath.Base(rf)) {
			t.Errorf("%s does not load %s", tf, rf)
		}
		for _, a := range alertsOf(t, rf) {
			fires, quiet := false, false
			for _, tc := range tests.Tests {
				for _, at := range tc.AlertRuleTest {
					if at.Alertname != a.Alert {
						continue
					}
					if len(at.ExpAlerts) > 0 {
						fires = true
					} else {
						quiet = true
					}
				}
			}
			if !fires || !quiet {
				t.Errorf("%s: alert %s has a firing case: %v, a quiet case: %v; want both", tf, a.Alert, fires, quiet)
			}
		}
	}
}

// A wrong rule fails its tests: each mutant below must make promtool test
// rules fail. A mutant that passes is a rule the tests do not pin down.
// One promtool run takes every mutant of a rule file (each in a directory
// of its own, with the file's tests beside it) and reports on each.
func TestPrometheus_RuleTestsCatchWrongRules(t *testing.T) {
	bin := promtool(t)
	caught := 0
	for _, rf := range mustGlob(t, "prometheus/rules/*.yml") {
		src, err := os.ReadFile(rf)
		if err != nil {
			t.Fatal(err)
		}
		tf := testFileOf(rf)
		testSrc, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		ms := mutants(t, src)
		dir := t.TempDir()
		var files []string
		for i, m := range ms {
			d := filepath.Join(dir, strconv.Itoa(i))
			mustWrite(t, filepath.Join(d, "rules", filepath.Base(rf)), m.rules)
			files = append(files, filepath.Join(d, "tests", filepath.Base(tf)))
			mustWrite(t, files[i], testSrc)
		}
		out, _ := exec.Command(bin, append([]string{"test", "rules"}, files...)...).CombinedOutput()
		results := testResults(string(out))
		for i, m := range ms {
			switch results[files[i]] {
			case "FAILED":
				caught++
			case "SUCCESS":
				t.Errorf("%s: the tests still pass with %s", rf, m.name)
			default:
				t.Errorf("%s: %s: no result from promtool:\n%s", rf, m.name, out)
			}
		}
	}
	t.Logf("%d wrong rules, each caught by the tests", caught)
}

// testResults reads promtool test rules' report: each test file's
// "Unit Testing:  <file>" line, then SUCCESS or FAILED.
func testResults(out string) map[string]string {
	results := map[string]string{}
	file := ""
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(line, "Unit Testing:"); ok {
			file = strings.TrimSpace(f)
			continue
		}
		switch l := strings.TrimSpace(line); {
		case file == "":
		case l == "SUCCESS":
			results[file] = "SUCCESS"
			file = ""
		case strings.HasPrefix(l, "FAILED"):
			results[file] = "FAILED"
			file = ""
		}
	}
	return results
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mutant is a rule file with one alert changed.
type mutant struct {
	name  string
	rules []byte
}

// threshold is a number compared with: `> 0.5`, `== 0`, `> 4 * …`.
var threshold = regexp.MustCompile(`(>=|<=|==|!=|>|<)(\s*(?:bool\s+)?)(\d+(?:\.\d+)?)\b`)

// mutants returns the rule file src with, for each alert in turn: each
// threshold doubled and halved (a zero moved to 1 and -1), its `for`
// dropped and doubled, and its expression matching nothing.
func mutants(t *testing.T, src []byte) []mutant {
	t.Helper()
	var out []mutant
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	for _, rule := range ruleNodes(&doc) {
		alert := mapValue(rule, "alert")
		if alert == nil {
			continue
		}
		expr := mapValue(rule, "expr")
		change := func(name string, apply func() (undo func())) {
			undo := apply()
			b, err := yaml.Marshal(&doc)
			undo()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, mutant{name: alert.Value + ": " + name, rules: b})
		}
		orig := expr.Value
		for _, loc := range threshold.FindAllStringSubmatchIndex(orig, -1) {
			num := orig[loc[6]:loc[7]]
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				t.Fatal(err)
			}
			moved := []float64{v * 2, v / 2}
			if v == 0 {
				moved = []float64{1, -1}
			}
			for _, w := range moved {
				s := strconv.FormatFloat(w, 'g', -1, 64)
				op := orig[loc[2]:loc[3]]
				change(fmt.Sprintf("%s %s instead of %s %s", op, s, op, num), func() func() {
					expr.Value = orig[:loc[6]] + s + orig[loc[7]:]
					return func() { expr.Value = orig }
				})
			}
		}
		change("an expression that matches nothing", func() func() {
			expr.Value = "vector(1) < 0"
			return func() { expr.Value = orig }
		})
		if f := mapValue(rule, "for"); f != nil {
			d := f.Value
			change("no for (was "+d+")", func() func() {
				f.Value = "0s"
				return func() { f.Value = d }
			})
			change("for twice "+d, func() func() {
				f.Value = doubleDuration(t, d)
				return func() { f.Value = d }
			})
		}
	}
	return out
}

// doubleDuration doubles a Prometheus duration of one unit ("10m").
func doubleDuration(t *testing.T, d string) string {
	t.Helper()
	i := strings.IndexFunc(d, func(r rune) bool { return r < '0' || r > '9' })
	n, err := strconv.Atoi(d[:i])
	if i <= 0 || err != nil {
		t.Fatalf("duration %q: want a number and one unit", d)
	}
	return strconv.Itoa(2*n) + d[i:]
}

// ruleNodes returns the rule mappings of a rule file: groups[*].rules[*].
func ruleNodes(doc *yaml.Node) []*yaml.Node {
	var rules []*yaml.Node
	groups := mapValue(doc.Content[0], "groups")
	for _, g := range groups.Content {
		if rs := mapValue(g, "rules"); rs != nil {
			rules = append(rules, rs.Content...)
		}
	}
	return rules
}

// mapValue returns the value of key in a YAML mapping, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// alertRule is the part of an alerting rule these tests read.
type alertRule struct {
	Alert string `yaml:"alert"`
}

func alertsOf(t *testing.T, path string) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var alerts []alertRule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alert", path)
	}
	return alerts
}

// ruleTests is the part of a promtool test file these tests read.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readRuleTests(t *testing.T, path string) ruleTests {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("every rule file needs its tests: %v", err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rt
}

// testFileOf names the test file of a rule file: rules/x.yml, tests/x_test.yml.
func testFileOf(ruleFile string) string {
	base := strings.TrimSuffix(filepath.Base(ruleFile), ".yml")
	return filepath.Join(filepath.Dir(filepath.Dir(ruleFile)), "tests", base+"_test.yml")
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("%s: no files (%v)", pattern, err)
	}
	return m
}
