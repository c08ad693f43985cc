package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildPlan runs deploy/images/build.sh --dry-run with args and a stand-in
// docker that knows only the images in known, and returns what it would
// build and the variables it would write.
func buildPlan(t *testing.T, known string, args ...string) (built string, env []string) {
	t.Helper()
	dir := t.TempDir()
	docker := `#!/usr/bin/env bash
[ "$1 $2" = "image inspect" ] || exit 1
for i in $FAKE_IMAGES; do [ "$i" = "$3" ] && exit 0; done
exit 1
`
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(docker), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{"images/build.sh", "--dry-run"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "FAKE_IMAGES="+known, "SHOP_IMAGES_PREFIX=t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build.sh --dry-run %q: %v\n%s", args, err, out)
	}
	m := regexp.MustCompile(`(?m)^would build: (.*)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("build.sh --dry-run %q does not say what it would build:\n%s", args, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "  ") {
			env = append(env, strings.TrimSpace(line))
		}
	}
	return string(m[1]), env
}

// TestImages_JaegerOnlyWhenAsked: Jaeger's stand-in takes minutes to
// compile, so the default run of deploy/images/build.sh, which CI makes,
// leaves it out; `build.sh jaeger` builds it on the debian stand-in, and
// once it exists every run keeps JAEGER_IMAGE in .env.
func TestImages_JaegerOnlyWhenAsked(t *testing.T) {
	const jaeger = "JAEGER_IMAGE=t/jaeger:"
	built, env := buildPlan(t, "")
	if built != "debian golang postgres redis nginx prometheus" {
		t.Errorf("build.sh builds %q by default, want the Debian stand-ins without jaeger", built)
	}
	if anyHasPrefix(env, jaeger) {
		t.Errorf("build.sh names a Jaeger stand-in it did not build: %q", env)
	}
	release := scriptValue(t, "images/build.sh", "jaeger_release")
	built, env = buildPlan(t, "", "jaeger")
	if built != "debian jaeger" || !anyHasPrefix(env, jaeger+release) {
		t.Errorf("build.sh jaeger builds %q and writes %q, want debian then jaeger, and %s%s", built, env, jaeger, release)
	}
	_, env = buildPlan(t, "t/jaeger:"+release)
	if !anyHasPrefix(env, jaeger+release) {
		t.Errorf("build.sh drops JAEGER_IMAGE from .env although its stand-in exists: %q", env)
	}

	// CI runs the default.
	b, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || !strings.Contains(line, "deploy/images/build.sh") {
			continue
		}
		if strings.HasPrefix(line, "step ") {
			continue // the step's title
		}
		runs++
		if line != "deploy/images/build.sh" {
			t.Errorf(".ci/run runs %q, want the default set (deploy/images/build.sh, no image named)", line)
		}
	}
	if runs == 0 {
		t.Error(".ci/run does not run deploy/images/build.sh: the scan is broken")
	}
}

// anyHasPrefix reports whether a line starts with prefix.
func anyHasPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
