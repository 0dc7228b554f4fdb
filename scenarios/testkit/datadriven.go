package testkit

// A small data-driven test runner in the format of cockroachdb/datadriven
// (the one etcd-raft's testdata/*.txt use), without the dependency. A file
// holds test cases separated by blank lines:
//
//	# a comment line (outside a case)
//	command arg1 arg2=val arg3=(a,b)
//	optional input lines
//	----
//	expected output lines
//
// The expected output ends at the next blank line. Output that contains
// blank lines is written between a double separator and closed by one:
//
//	command
//	----
//	----
//	first paragraph
//
//	second paragraph
//	----
//	----
//
// RunDataDriven calls the handler for each case in order (one subtest per
// case, all sharing whatever state the handler keeps) and compares what it
// returns with the expected output. With -rewrite (or RAIDQ_REWRITE=1 in
// the environment) it writes the handlers' outputs back into the file
// instead of comparing.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of data-driven test files in place")

// Rewriting says whether data-driven tests rewrite their files.
func Rewriting() bool { return *rewrite || os.Getenv("RAIDQ_REWRITE") == "1" }

// CmdArg is one argument of a command line: key, key=val or key=(a,b).
type CmdArg struct {
	Key  string
	Vals []string
}

func (a CmdArg) String() string {
	switch len(a.Vals) {
	case 0:
		return a.Key
	case 1:
		return a.Key + "=" + a.Vals[0]
	}
	return a.Key + "=(" + strings.Join(a.Vals, ",") + ")"
}

// TestData is one test case.
type TestData struct {
	Pos      string // file:line of the command
	Line     int    // the command's line number in its file
	Cmd      string
	CmdArgs  []CmdArg
	Input    string // the lines between the command and "----"
	Expected string

	// Where the case sits in its file (line indexes), for -rewrite.
	sepLine, endLine int
}

// Arg returns the argument named key and whether it is there.
func (d *TestData) Arg(key string) (CmdArg, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a, true
		}
	}
	return CmdArg{}, false
}

// HasArg says whether the command names key.
func (d *TestData) HasArg(key string) bool { _, ok := d.Arg(key); return ok }

// Val returns the single value of key, or def when the command lacks key.
func (d *TestData) Val(key, def string) string {
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) == 0 {
		return def
	}
	return a.Vals[0]
}

// Fatalf fails the case, naming its file and line.
func (d *TestData) Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s: %s: %s", d.Pos, d.Cmd, fmt.Sprintf(format, args...))
}

// ParseDataDriven reads the cases of a file's text.
func ParseDataDriven(name, text string) ([]*TestData, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var cases []*TestData
	for i := 0; i < len(lines); {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			i++
			continue
		}
		d := &TestData{Pos: fmt.Sprintf("%s:%d", name, i+1), Line: i + 1}
		if err := d.parseCmd(line); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Pos, err)
		}
		i++
		var input []string
		for ; i < len(lines) && lines[i] != "----"; i++ {
			input = append(input, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: %s: no ---- separator", d.Pos, d.Cmd)
		}
		d.Input, d.sepLine = strings.Join(input, "\n"), i
		i++
		var want []string
		if i < len(lines) && lines[i] == "----" { // double separator: ends at "----\n----"
			for i++; i < len(lines) && !(lines[i] == "----" && i+1 < len(lines) && lines[i+1] == "----"); i++ {
				want = append(want, lines[i])
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s: %s: no closing ----/---- for its output", d.Pos, d.Cmd)
			}
			i += 2
		} else {
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
				want = append(want, lines[i])
			}
		}
		d.Expected, d.endLine = strings.Join(want, "\n"), i
		cases = append(cases, d)
	}
	return cases, nil
}

// parseCmd splits a command line into its command and arguments.
func (d *TestData) parseCmd(line string) error {
	fields := strings.Fields(line)
	d.Cmd = fields[0]
	for j := 1; j < len(fields); j++ {
		f := fields[j]
		key, val, hasVal := strings.Cut(f, "=")
		a := CmdArg{Key: key}
		switch {
		case !hasVal:
		case strings.HasPrefix(val, "("):
			for !strings.HasSuffix(val, ")") && j+1 < len(fields) { // "(a, b)" with spaces
				j++
				val += fields[j]
			}
			if !strings.HasSuffix(val, ")") {
				return fmt.Errorf("argument %s: unclosed (", key)
			}
			for _, v := range strings.Split(val[1:len(val)-1], ",") {
				if v = strings.TrimSpace(v); v != "" {
					a.Vals = append(a.Vals, v)
				}
			}
		default:
			a.Vals = []string{val}
		}
		d.CmdArgs = append(d.CmdArgs, a)
	}
	return nil
}

// DataDrivenFiles lists the *.txt files of dir, sorted; it fails the test
// when there are none (a misspelt directory must not pass quietly).
func DataDrivenFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no *.txt files in %s", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// RunDataDriven runs every case of the file at path through f, in order,
// as subtests named after the case's line and command.
func RunDataDriven(t *testing.T, path string, f func(t *testing.T, d *TestData) string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := ParseDataDriven(path, string(raw))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(cases))
	for i, d := range cases {
		differs := false
		ok := t.Run(fmt.Sprintf("%d_%s", d.Line, d.Cmd), func(t *testing.T) {
			got[i] = strings.TrimRight(f(t, d), "\n")
			if differs = got[i] != d.Expected; differs && !Rewriting() {
				t.Errorf("%s: %s: output differs (- expected, + got; RAIDQ_REWRITE=1 rewrites the file):\n%s",
					d.Pos, d.Cmd, Diff(d.Expected, got[i]))
			}
		})
		if !ok && (Rewriting() || !differs) {
			// The handler gave up on this case (t.Fatal): later cases
			// build on its state, and the file is not rewritten.
			t.Fatalf("%s: stopped at the case of line %d", path, d.Line)
		}
	}
	if Rewriting() {
		if err := os.WriteFile(path, []byte(rewritten(string(raw), cases, got)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rewritten is text with each case's expected output replaced by got.
func rewritten(text string, cases []*TestData, got []string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var out []string
	next := 0
	for i, d := range cases {
		out = append(out, lines[next:d.sepLine+1]...)
		if strings.Contains(got[i], "\n\n") || strings.HasPrefix(got[i], "\n") || strings.HasPrefix(got[i], "----") {
			out = append(out, "----")
			out = append(out, got[i], "----", "----")
		} else if got[i] != "" {
			out = append(out, got[i])
		}
		next = d.endLine
	}
	out = append(out, lines[next:]...)
	return strings.Join(out, "\n") + "\n"
}

// Diff shows two texts line by line: common lines indented, lines only in
// want marked "-", lines only in got marked "+" (a longest-common-
// subsequence diff; outputs of tests are short).
func Diff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	lcs := make([][]int, len(a)+1) // lcs[i][j]: common length of a[i:], b[j:]
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			sb.WriteString("  " + a[i] + "\n")
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			sb.WriteString("- " + a[i] + "\n")
			i++
		default:
			sb.WriteString("+ " + b[j] + "\n")
			j++
		}
	}
	return sb.String()
}
