package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
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

// TestImages_ShopDockerfilesAgree: the shop image built from a binary of
// the host (deploy/images/shop/Dockerfile, make up's way when the host has
// Go) is the repository's Dockerfile's runtime stage with the binary
// copied in rather than compiled: the same base, user, directory, ports,
// entrypoint and command.
func TestImages_ShopDockerfilesAgree(t *testing.T) {
	runtime := func(path, from string) []string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		in := false
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "FROM ") {
				in = line == from
			}
			if !in || line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			// The binary and the data directory come from the build
			// stage in one, from the context in the other.
			line = strings.NewReplacer("--from=build ", "", "/out/shop", "shop", "/out/data", "data").Replace(line)
			out = append(out, line)
		}
		if len(out) == 0 {
			t.Fatalf("%s has no stage %q", path, from)
		}
		return out
	}
	full := runtime("../Dockerfile", "FROM ${RUNTIME_IMAGE}")
	host := runtime("images/shop/Dockerfile", "FROM ${RUNTIME_IMAGE}")
	if strings.Join(full, "\n") != strings.Join(host, "\n") {
		t.Errorf("the runtime stages differ:\nDockerfile:\n%s\n\ndeploy/images/shop/Dockerfile:\n%s", strings.Join(full, "\n"), strings.Join(host, "\n"))
	}
	if a, b := scriptValue(t, "../Dockerfile", "ARG RUNTIME_IMAGE"), scriptValue(t, "images/shop/Dockerfile", "ARG RUNTIME_IMAGE"); a != b || a == "" {
		t.Errorf("RUNTIME_IMAGE defaults to %q in the Dockerfile, %q in deploy/images/shop/Dockerfile", a, b)
	}
}

// TestImages_BuildContext: .dockerignore lets into the build context what
// the binary is built from, every package cmd/shop imports and the files
// they embed, and nothing else: .env (make up rewrites it), the docs, the
// deployment files, the tests. A file left out that the build needs
// breaks the build; one let in that it does not spoils the builder's
// cache whenever it changes.
func TestImages_BuildContext(t *testing.T) {
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(path string) bool {
		t.Helper()
		// As the builder walks the context: a file is sent unless it, or
		// a directory above it that no later pattern reopens, is excluded.
		ok, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles \",\"}}|{{join .EmbedFiles \",\"}}{{end}}{{end}}", "../cmd/shop").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			continue
		}
		dir, err := filepath.Rel(root, parts[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range parts[1:] {
			for _, name := range strings.Split(list, ",") {
				if name != "" {
					needed = append(needed, filepath.ToSlash(filepath.Join(dir, name)))
				}
			}
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list found only %d files of cmd/shop: the scan is broken", len(needed))
	}
	for _, f := range needed {
		if excluded(f) {
			t.Errorf(".dockerignore leaves out %s, which the binary is built from", f)
		}
	}
	for _, f := range []string{".env", ".images/env", "README.md", "docs/API.md", "docs/docs_test.go", "deploy/up.sh",
		"deploy/nginx.conf", "loadtest/k6/smoke.js", "e2e/e2e_test.go", "internal/orders/orders_test.go",
		"bin/shop", ".git/HEAD", "docker-compose.yml", "Makefile", ".ci/run"} {
		if !excluded(f) {
			t.Errorf(".dockerignore lets %s into the build context, which the binary is not built from", f)
		}
	}
}

// TestImages_CleanTakesOnlyItsOwn: make clean-images removes the shop
// image and the stand-ins under the prefix (deploy/images/clean.sh), not
// the images of other names on the engine, which other checkouts and
// other projects may use.
func TestImages_CleanTakesOnlyItsOwn(t *testing.T) {
	dir := t.TempDir()
	docker := `#!/usr/bin/env bash
case "$1 $2" in
"image inspect") [ "$5" = "shop:t" ] && echo sha256:shop && exit 0; exit 1 ;;
"image ls")
  if [ "$3" = --filter ]; then
    printf '%s\n' "1 t/postgres:15" "2 t/redis:7" "3 other-local/postgres:15" "4 tt/nginx:1"
  elif [ "${5:-}" = t/rootfs ]; then
    echo "5 t/rootfs:debian"
  fi ;;
esac
exit 0
`
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(docker), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "images/clean.sh", "--dry-run")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "SHOP_IMAGES_PREFIX=t", "SHOP_IMAGE=shop:t",
		"SHOP_IMAGES_CACHE="+filepath.Join(dir, "cache"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("clean.sh --dry-run: %v\n%s", err, out)
	}
	var would []string
	for _, m := range regexp.MustCompile(`would remove (\S+)`).FindAllStringSubmatch(string(out), -1) {
		if !strings.HasPrefix(m[1], "/") { // the cache, below
			would = append(would, m[1])
		}
	}
	want := []string{"shop:t", "t/postgres:15", "t/redis:7", "t/rootfs:debian"}
	slices.Sort(would)
	if !slices.Equal(would, want) {
		t.Errorf("clean.sh would remove the images %q, want %q", would, want)
	}
	if !strings.Contains(string(out), "would remove "+filepath.Join(dir, "cache")) {
		t.Errorf("clean.sh would leave its cache:\n%s", out)
	}
}
