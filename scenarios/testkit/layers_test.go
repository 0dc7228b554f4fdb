package testkit

// The package table of docs/design.md (## Architecture, ### Packages)
// checked against the module: it names every package once, and each row's
// imports column names exactly the module's packages the package imports
// (its non-test imports, as go list reports them). .ci/run runs it in its
// layers step; go test ./... runs it too.

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	modulePath  = "github.com/raidq/raidq"
	moduleRoot  = "../.."
	designDoc   = "docs/design.md"
	tableHeader = "### Packages"
)

func TestPackageTable(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH, so go list cannot report the module's imports; the package table of docs/design.md is not checked")
	}
	f, err := os.Open(filepath.Join(moduleRoot, designDoc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := parsePackageTable(f)
	if err != nil {
		t.Fatalf("%s: %v", designDoc, err)
	}

	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", "./...")
	cmd.Dir = moduleRoot
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.String())
	}
	actual, err := parseGoList(string(out))
	if err != nil {
		t.Fatal(err)
	}
	touchModuleTree(t)

	if diff := diffPackageTable(table, actual); diff != "" {
		t.Errorf("%s, %s: the package table does not match the imports go list reports "+
			"(the imports column names exactly the raidq packages a package imports, test files aside; "+
			"a new package needs a row, a new or dropped import an edit of its row):\n%s", designDoc, tableHeader, diff)
	}
}

// touchModuleTree reads every directory of the module, which go test
// records: the cached result of this test is then reused only while no
// file or directory of the module changed. Without it a pass stays cached
// after an import changes elsewhere, since go list runs in a child process
// that the test cache does not see.
func touchModuleTree(t *testing.T) {
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != moduleRoot {
			if n := d.Name(); strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// parseGoList reads lines "importpath|import import ..." into the
// module's packages and their in-module imports, both short names
// ("raidq" for the module's root, "actors/core" for the others).
func parseGoList(out string) (map[string][]string, error) {
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		path, imports, ok := strings.Cut(line, "|")
		if !ok {
			return nil, fmt.Errorf("go list: unexpected line %q", line)
		}
		name, ok := shortName(path)
		if !ok {
			return nil, fmt.Errorf("go list: package %s is outside module %s", path, modulePath)
		}
		deps := []string{}
		for _, imp := range strings.Fields(imports) {
			if n, ok := shortName(imp); ok {
				deps = append(deps, n)
			}
		}
		pkgs[name] = deps
	}
	return pkgs, nil
}

func shortName(importPath string) (string, bool) {
	if importPath == modulePath {
		return "raidq", true
	}
	rest, ok := strings.CutPrefix(importPath, modulePath+"/")
	return rest, ok
}

// tableRow is one row of the package table.
type tableRow struct {
	line    int
	imports []string
}

var (
	backticked  = regexp.MustCompile("`([^`]+)`")
	packageName = regexp.MustCompile(`^[a-z0-9_]+(/[a-z0-9_]+)*$`)
)

// parsePackageTable reads the first Markdown table after the line
// "### Packages". Its first column names one package in backticks
// (`raidq` for the module's root); its column headed "imports" is a
// comma-separated list of the raidq packages it imports, by the same
// names, or nothing; text after an em dash (—) in that cell is a note and
// is not read.
func parsePackageTable(r io.Reader) (map[string]tableRow, error) {
	sc := bufio.NewScanner(r)
	lineNo := 0
	inSection, inTable := false, false
	importsCol := -1
	rows := map[string]tableRow{}
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if !inSection {
			inSection = line == tableHeader
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			if strings.HasPrefix(line, "#") {
				return nil, fmt.Errorf("line %d: no table under %q", lineNo, tableHeader)
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !inTable {
			inTable = true
			for i, c := range cells {
				if strings.HasPrefix(strings.ToLower(c), "imports") {
					importsCol = i
				}
			}
			if importsCol < 1 {
				return nil, fmt.Errorf("line %d: the table under %q has no column headed \"imports\"", lineNo, tableHeader)
			}
			continue
		}
		if strings.Trim(line, "|-: ") == "" {
			continue // the separator row
		}
		if len(cells) <= importsCol {
			return nil, fmt.Errorf("line %d: %d cells, the imports column is number %d", lineNo, len(cells), importsCol+1)
		}
		m := backticked.FindStringSubmatch(cells[0])
		if m == nil || !packageName.MatchString(m[1]) {
			return nil, fmt.Errorf("line %d: the first cell names no package in backticks: %q", lineNo, cells[0])
		}
		name := m[1]
		if prev, dup := rows[name]; dup {
			return nil, fmt.Errorf("line %d: a second row for %s (the first is on line %d)", lineNo, name, prev.line)
		}
		list, _, _ := strings.Cut(cells[importsCol], "—")
		imports := []string{}
		for _, imp := range strings.Split(list, ",") {
			imp = strings.TrimSpace(imp)
			if imp == "" {
				continue
			}
			if !packageName.MatchString(imp) {
				return nil, fmt.Errorf("line %d (%s): %q in the imports column is not a package name (a note goes after an em dash: \"a, b — note\")", lineNo, name, imp)
			}
			if slices.Contains(imports, imp) {
				return nil, fmt.Errorf("line %d (%s): %s listed twice", lineNo, name, imp)
			}
			imports = append(imports, imp)
		}
		rows[name] = tableRow{line: lineNo, imports: imports}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !inSection {
		return nil, fmt.Errorf("no line %q", tableHeader)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no table rows under %q", tableHeader)
	}
	return rows, nil
}

// diffPackageTable says, one line per package in order, what the table
// misses or has extra; "" when they agree.
func diffPackageTable(table map[string]tableRow, actual map[string][]string) string {
	var names []string
	for n := range actual {
		names = append(names, n)
	}
	for n := range table {
		if _, ok := actual[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		row, listed := table[n]
		imports, exists := actual[n]
		switch {
		case !exists:
			fmt.Fprintf(&b, "  %s (line %d): no such package in the module; remove the row\n", n, row.line)
		case !listed:
			fmt.Fprintf(&b, "  %s: no row; it imports: %s\n", n, importsCell(imports))
		default:
			var missing, extra []string
			for _, imp := range imports {
				if !slices.Contains(row.imports, imp) {
					missing = append(missing, imp)
				}
			}
			for _, imp := range row.imports {
				if !slices.Contains(imports, imp) {
					extra = append(extra, imp)
				}
			}
			if len(missing)+len(extra) == 0 {
				continue
			}
			fmt.Fprintf(&b, "  %s (line %d):", n, row.line)
			if len(missing) > 0 {
				fmt.Fprintf(&b, " missing %s;", strings.Join(missing, ", "))
			}
			if len(extra) > 0 {
				fmt.Fprintf(&b, " listed but not imported %s;", strings.Join(extra, ", "))
			}
			fmt.Fprintf(&b, " it imports: %s\n", importsCell(imports))
		}
	}
	return b.String()
}

// importsCell is the imports column's text for these imports: the root
// first, then by name.
func importsCell(imports []string) string {
	if len(imports) == 0 {
		return "— (no raidq package)"
	}
	s := slices.Clone(imports)
	slices.SortFunc(s, func(a, b string) int {
		if a == "raidq" || b == "raidq" {
			return strings.Compare(b, a) // "raidq" < anything
		}
		return strings.Compare(a, b)
	})
	return strings.Join(s, ", ")
}

func TestParsePackageTable(t *testing.T) {
	doc := "## Architecture\n\n| x | y |\n|---|---|\n| `a` | b |\n\n### Packages\n\nText.\n\n" +
		"| package | holds | imports (raidq packages) |\n|---|---|---|\n" +
		"| `raidq` (root) | the client | actors, stripe — never nats-server |\n" +
		"| `actors` | actors | stripe |\n" +
		"| `stripe` | batches | — (none) |\n" +
		"| `old` | gone | |\n" +
		"\nThe rules.\n\n| `after` | not read | x |\n"
	table, err := parsePackageTable(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 4 || !slices.Equal(table["raidq"].imports, []string{"actors", "stripe"}) ||
		!slices.Equal(table["actors"].imports, []string{"stripe"}) || len(table["stripe"].imports) != 0 || table["actors"].line != 14 {
		t.Fatalf("table: %+v", table)
	}
	diff := diffPackageTable(table, map[string][]string{
		"raidq":   {"stripe", "actors"},
		"actors":  {"stripe", "bus"},
		"stripe":  {},
		"bus":     {},
		"invar":   {"stripe"},
		"unknown": {"raidq", "bus"},
	})
	want := "  actors (line 14): missing bus; it imports: bus, stripe\n" +
		"  bus: no row; it imports: — (no raidq package)\n" +
		"  invar: no row; it imports: stripe\n" +
		"  old (line 16): no such package in the module; remove the row\n" +
		"  unknown: no row; it imports: raidq, bus\n"
	if diff != want {
		t.Errorf("diff:\n%s\nwant:\n%s", diff, want)
	}
	if d := diffPackageTable(map[string]tableRow{"a": {1, []string{"b", "c"}}}, map[string][]string{"a": {"b"}}); d != "  a (line 1): listed but not imported c; it imports: b\n" {
		t.Errorf("extra: %q", d)
	}
	for _, bad := range []string{
		"### Packages\n\nno table\n\n## Next\n",
		"### Packages\n\n| package | holds |\n|---|---|\n| `a` | x |\n",
		"### Packages\n\n| package | imports |\n|---|---|\n| a | x |\n",
		"### Packages\n\n| package | imports |\n|---|---|\n| `a` | x (only some) |\n",
		"### Packages\n\n| package | imports |\n|---|---|\n| `a` | x |\n| `a` | y |\n",
		"### Packages\n\n| package | imports |\n|---|---|\n| `a` | x, x |\n",
		"# Design\n",
	} {
		if _, err := parsePackageTable(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
