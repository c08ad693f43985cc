package k6compat

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"
)

// compile bundles the script and the local files it imports into one
// CommonJS program: goja runs ES5+ scripts but not ES modules. k6's own
// modules stay require("k6/...") calls, answered by the VU's require; a
// remote import (https://jslib.k6.io/...) does too, and require refuses it.
// The inline source map makes errors point at the script's own lines.
func compile(path string) (*goja.Program, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	res := api.Build(api.BuildOptions{
		EntryPoints: []string{abs},
		Bundle:      true,
		Write:       false,
		Format:      api.FormatCommonJS,
		Platform:    api.PlatformNeutral,
		Target:      api.ES2017,
		Sourcemap:   api.SourceMapInline,
		External:    []string{"k6", "k6/*", "https://*", "http://*"},
		// goja has no import(): say so at build time.
		Supported: map[string]bool{"dynamic-import": false},
		LogLevel:  api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		var msgs []string
		for _, m := range res.Errors {
			loc := ""
			if m.Location != nil {
				loc = fmt.Sprintf("%s:%d:%d: ", m.Location.File, m.Location.Line, m.Location.Column)
			}
			msgs = append(msgs, loc+m.Text)
		}
		return nil, fmt.Errorf("bundle %s: %s", path, strings.Join(msgs, "; "))
	}
	if len(res.OutputFiles) != 1 {
		return nil, fmt.Errorf("bundle %s: %d output files, want 1", path, len(res.OutputFiles))
	}
	prg, err := goja.Compile(filepath.Base(path), string(res.OutputFiles[0].Contents), false)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", path, err)
	}
	return prg, nil
}
