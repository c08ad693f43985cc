package docs_test

// README.md is the first screen a newcomer reads: short, one table of
// where each layer of each flow is, and a link to every document. The
// table names code, so a rename that leaves it behind fails here.

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	readme         = "../README.md"
	readmeMaxLines = 300
)

// layerColumns are the header of the README's layer table, after its
// first column (the flow).
var layerColumns = []string{"0 idempotency", "1 lock", "2 state", "3 version", "4 constraint"}

// layerFlows are words each of the table's rows names, one row each.
var layerFlows = []string{"orders", "payments", "refunds", "seat", "likes", "fulfilment"}

// TestReadme_Short fails when README.md grows past readmeMaxLines: its
// long sections belong in docs/, linked from it.
func TestReadme_Short(t *testing.T) {
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the section that grew into docs/ and link to it", n, readmeMaxLines)
	}
}

// TestReadme_LinksEveryDocument fails when a document of docs/ is not
// linked from README.md, so none is left for a reader to find by chance.
func TestReadme_LinksEveryDocument(t *testing.T) {
	linked := map[string]bool{}
	for _, l := range links(t, readme) {
		path, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(path)] = true
	}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %q: the scan is broken", docs)
	}
	for _, d := range docs {
		if !linked[filepath.Join("docs", d)] {
			t.Errorf("README.md does not link docs/%s", d)
		}
	}
}

// TestReadme_LayerTable fails when the README's layer table is not 5
// flows by the 5 layers, or when a cell names a file that does not exist
// or a function (a constraint, for a migration) that its file does not
// declare.
func TestReadme_LayerTable(t *testing.T) {
	rows, err := layerTable(t, readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(layerFlows) {
		t.Errorf("the layer table has %d rows, want %d (%s)", len(rows), len(layerFlows), strings.Join(layerFlows, ", "))
	}
	for _, word := range layerFlows {
		n := 0
		for _, r := range rows {
			if strings.Contains(r.flow, word) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d rows of the layer table name %q, want 1", n, word)
		}
	}
	decls := declarations{}
	for _, r := range rows {
		files := map[string]bool{}
		for i, cell := range r.cells {
			if err := decls.checkCell(cell); err != nil {
				t.Errorf("README.md:%d: %s, %s: %v", r.line, r.flow, layerColumns[i], err)
			}
			for _, m := range codeRE.FindAllStringSubmatch(cell, -1) {
				if cellFileRE.MatchString(m[1]) {
					files[m[1]] = true
				}
			}
		}
		// A newcomer names every layer of a flow from a handful of files.
		if len(files) > maxLayerFiles {
			t.Errorf("README.md:%d: %s: its layers are in %d files, want at most %d", r.line, r.flow, len(files), maxLayerFiles)
		}
	}
}

// maxLayerFiles bounds the files a row of the layer table names.
const maxLayerFiles = 5

// TestReadme_LayerCellCheck shows what the cell check refuses: a function
// the file does not declare, a file that does not exist, a constraint no
// migration of that name creates, a name with no file before it, and code
// that is neither a file nor a name.
func TestReadme_LayerCellCheck(t *testing.T) {
	cases := []struct {
		cell string
		ok   bool
	}{
		{"`internal/orders/postgres.go` `Store.Update`", true},
		{"create: `internal/inventory/postgres.go` `Store.Take`; cancel: `internal/orders/orders.go` `Cancel`", true},
		{"`migrations/000003_orders.up.sql` `orders_user_request_key`, `stock_releases_pkey`", true},
		{"`migrations/000007_seats.up.sql` `hold_seats_one_active_per_seat`", true}, // a unique index
		{"`internal/orders/postgres.go` `Store.Updat`", false},
		{"`internal/orders/postgres.go` `Service.Create`", false}, // Service's, in service.go
		{"`internal/orders/postgres.go` `Update`", false},         // a method, not a function
		{"`internal/orders/store.go` `Store.Update`", false},
		{"`migrations/000003_orders.up.sql` `orders_request_key`", false},
		{"`migrations/000003_orders.up.sql` `products_stock_nonnegative`", false}, // in 000002
		{"`Store.Create`", false},
		{"`internal/orders/postgres.go` `order:{id}`", false},
		{"`internal/orders/postgres.go`", false},
		{"none", false},
	}
	decls := declarations{}
	for _, tc := range cases {
		err := decls.checkCell(tc.cell)
		if (err == nil) != tc.ok {
			t.Errorf("checkCell(%s) = %v, want ok %v", tc.cell, err, tc.ok)
		}
	}
}

// layerRow is a row of the layer table: its flow and its five cells.
type layerRow struct {
	line  int
	flow  string
	cells []string
}

// layerTable returns the rows of the table in file whose header is
// "flow" and layerColumns.
func layerTable(t *testing.T, file string) ([]layerRow, error) {
	t.Helper()
	lines := proseLines(t, file)
	want := append([]string{"flow"}, layerColumns...)
	for i, l := range lines {
		if !slices.Equal(tableCells(l.text), want) {
			continue
		}
		var rows []layerRow
		for _, r := range lines[i+2:] {
			if !strings.HasPrefix(strings.TrimSpace(r.text), "|") {
				break
			}
			cells := tableCells(r.text)
			if len(cells) != len(want) {
				return nil, fmt.Errorf("%s:%d: %d cells, want %d", file, r.n, len(cells), len(want))
			}
			rows = append(rows, layerRow{line: r.n, flow: cells[0], cells: cells[1:]})
		}
		return rows, nil
	}
	return nil, fmt.Errorf("%s has no table whose header is | %s |", file, strings.Join(want, " | "))
}

// tableCells returns the trimmed cells of a Markdown table row.
func tableCells(row string) []string {
	row = strings.TrimSpace(row)
	if !strings.HasPrefix(row, "|") {
		return nil
	}
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var out []string
	for _, c := range strings.Split(strings.ReplaceAll(row, `\|`, "\x00"), "|") {
		out = append(out, strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|"))
	}
	return out
}

var (
	cellFileRE = regexp.MustCompile(`^(?:internal|cmd|migrations)/[\w./-]+\.(?:go|sql)$`)
	cellNameRE = regexp.MustCompile(`^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?$`)
)

// declarations caches what each file of the repository declares: a Go
// file's functions (Name) and methods (Type.Name), a migration's
// constraints and indexes.
type declarations map[string]map[string]bool

// checkCell checks a cell of the layer table: its code spans are files
// (from the repository's root), each followed by one or more names that
// file declares.
func (d declarations) checkCell(cell string) error {
	spans := codeRE.FindAllStringSubmatch(cell, -1)
	file, names := "", 0
	for _, m := range spans {
		span := m[1]
		switch {
		case cellFileRE.MatchString(span):
			if file != "" && names == 0 {
				return fmt.Errorf("%s names nothing in it", file)
			}
			file, names = span, 0
		case cellNameRE.MatchString(span):
			if file == "" {
				return fmt.Errorf("%s: no file before it", span)
			}
			have, err := d.of(file)
			if err != nil {
				return err
			}
			if !have[span] {
				return fmt.Errorf("%s declares no %s", file, span)
			}
			names++
		default:
			return fmt.Errorf("`%s` is neither a file nor a name: the cells hold only those", span)
		}
	}
	if file == "" || names == 0 {
		return errors.New("the cell names no file and what it declares")
	}
	return nil
}

// of returns what file declares.
func (d declarations) of(file string) (map[string]bool, error) {
	if have, ok := d[file]; ok {
		return have, nil
	}
	path := filepath.Join("..", file)
	var have map[string]bool
	var err error
	if strings.HasSuffix(file, ".sql") {
		have, err = sqlDeclarations(path)
	} else {
		have, err = goDeclarations(path)
	}
	if err != nil {
		return nil, err
	}
	d[file] = have
	return have, nil
}

// goDeclarations returns the functions (Name), methods (Type.Name) and
// top-level constants and variables (a flow's catalogue of its
// constraints) the Go file declares.
func goDeclarations(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, decl := range f.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok {
			for _, spec := range gen.Specs {
				if v, ok := spec.(*ast.ValueSpec); ok {
					for _, n := range v.Names {
						out[n.Name] = true
					}
				}
			}
			continue
		}
		fn, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fn.Recv == nil || len(fn.Recv.List) == 0 {
			out[fn.Name.Name] = true
			continue
		}
		if recv := receiverType(fn.Recv.List[0].Type); recv != "" {
			out[recv+"."+fn.Name.Name] = true
		}
	}
	return out, nil
}

// receiverType returns T of a receiver T, *T, T[P] or *T[P].
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// sqlCreatesRE finds the names of the constraints and indexes a migration
// creates.
var sqlCreatesRE = regexp.MustCompile(`(?i)\b(?:CONSTRAINT|INDEX)\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)

// sqlDeclarations returns the constraints and indexes the migration
// creates.
func sqlDeclarations(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range sqlCreatesRE.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out, nil
}
