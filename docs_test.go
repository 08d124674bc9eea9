package baton_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The documentation's Go code blocks are type-checked here, in process, with
// go/parser and go/types, against the export data of the packages they use
// (one `go list -export` for all of them). Errors are reported at the
// Markdown file and line of the offending code, through //line directives.
//
// A block that starts with a package clause is a whole file and is checked
// as it is. Any other block is a fragment, completed as follows:
//
//   - Column-0 `type`, `func` and `import` declarations stay at file scope;
//     every other line is a statement of one wrapper function, in order.
//   - The wrapper is `func _()` unless the block is annotated with an HTML
//     comment just above its fence (blank lines may separate them):
//
//     <!-- compile: func(ctx context.Context, pool *pgxpool.Pool) error -->
//
//     The signature names the variables the fragment takes from its
//     surroundings and what its return statements return. A wrapper with
//     results ends with a terminating panic, so a fragment need not end in
//     a return.
//   - Further lines of the comment, before `-->`, are Go declarations added
//     at file scope: the types and functions the fragment uses but does not
//     show. A function may be declared without a body:
//
//     <!-- compile: func(ctx context.Context) error
//     type Delivery struct{ Attempts int }
//     func send(ctx context.Context, id int64, d Delivery) (time.Duration, error)
//     -->
//
//   - A line `external <import path>...` lists packages of other modules the
//     fragment uses but this module does not depend on (goose,
//     golang-migrate). Their imports may fail; everything else in the block
//     is still checked, only the names they export go unchecked.
//   - A line `use <name>...` names variables the fragment declares for code
//     it leaves out (`// ...`): they may stay unused.
//   - Imports are added for the package names the fragment uses and does not
//     declare, from docImports. A name it does not list (or an ambiguous one,
//     such as memory) is imported in the annotation: `import lockmem "…"`.
//
// Unused variables and imports are errors, as they are for the compiler.

const docPackagePath = module + "/docblock"

// docImports maps the package names that fragments use without importing
// them to their import paths.
var docImports = map[string]string{
	// standard library
	"bytes": "bytes", "context": "context", "errors": "errors", "fmt": "fmt",
	"io": "io", "net": "net", "os": "os", "strings": "strings", "sync": "sync",
	"time": "time", "slog": "log/slog", "json": "encoding/json", "http": "net/http",
	"httptest": "net/http/httptest", "sql": "database/sql", "testing": "testing",
	"signal": "os/signal", "url": "net/url", "atomic": "sync/atomic",
	"strconv": "strconv", "slices": "slices",
	// this module
	"lock":        module + "/core/lock",
	"lease":       module + "/core/lease",
	"holder":      module + "/core/holder",
	"outbox":      module + "/core/outbox",
	"projection":  module + "/core/projection",
	"workrow":     module + "/core/workrow",
	"pgxstore":    module + "/backends/pgxstore",
	"pglock":      module + "/locks/pglock",
	"graph":       module + "/graph",
	"graphtest":   module + "/graph/graphtest",
	"bunstore":    module + "/backends/bunstore",
	"conformance": module + "/conformance",
	"console":     module + "/console",
	"testenv":     module + "/internal/testenv",
	// drivers
	"pgx":     "github.com/jackc/pgx/v5",
	"pgxpool": "github.com/jackc/pgx/v5/pgxpool",
	"pgconn":  "github.com/jackc/pgx/v5/pgconn",
	"redis":   "github.com/redis/go-redis/v9",
	"bun":     "github.com/uptrace/bun",
}

// TestDocs_EveryGoBlockInTheREADMEAndDocsCompiles type-checks every ```go
// block of README.md and docs/*.md.
func TestDocs_EveryGoBlockInTheREADMEAndDocsCompiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	var blocks []*docBlock
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := extractGoBlocks(filepath.ToSlash(f), src)
		if err != nil {
			t.Error(err)
			continue
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go blocks found in README.md and docs/*.md; the check would prove nothing")
	}
	for _, msg := range checkDocBlocks(t, blocks) {
		t.Error(msg)
	}
	t.Logf("checked %d Go blocks in %d files", len(blocks), len(files))
}

// TestDocs_IndexLinksEveryGuide keeps docs/README.md an index of every guide
// in docs/.
func TestDocs_IndexLinksEveryGuide(t *testing.T) {
	index, err := os.ReadFile(filepath.Join("docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guides {
		name := filepath.Base(g)
		if name != "README.md" && !bytes.Contains(index, []byte("]("+name+")")) {
			t.Errorf("docs/README.md does not link %s; add one line for it under Guides", g)
		}
	}
}

// TestDocs_EveryTableRowHasItsHeadersWidth: a Markdown table row with more
// or fewer cells than its header renders shifted or cut, so a figure lands
// under the wrong column without anyone noticing.
func TestDocs_EveryTableRowHasItsHeadersWidth(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md", "CHANGELOG.md"}, files...)
	tables := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, problems := checkTableWidths(filepath.ToSlash(f), string(src))
		tables += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if tables == 0 {
		t.Fatal("no Markdown tables found; the check would prove nothing")
	}
}

func TestDocs_ATableRowOfAnotherWidthIsReportedAtItsLine(t *testing.T) {
	md := "# T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 1 | 2 | 3 |\n\n```\n| x |\n| x | y |\n```\n\n| p \\| q | r |\n|---|---|\n"
	n, problems := checkTableWidths("t.md", md)
	if n != 2 {
		t.Errorf("found %d tables, want 2 (a fenced block is no table)", n)
	}
	want := []string{"t.md:6: 3 cells, its table's header has 2"}
	if !slices.Equal(problems, want) {
		t.Errorf("problems %q, want %q", problems, want)
	}
}

// checkTableWidths returns how many tables src holds, outside fenced code
// blocks, and a problem for every row whose cell count differs from its
// header's. A cell may hold an escaped pipe (\|).
func checkTableWidths(file, src string) (tables int, problems []string) {
	fenced := false
	width := 0 // the current table's header width; 0 outside a table
	for i, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "|") {
			width = 0
			continue
		}
		cells := strings.Count(strings.ReplaceAll(strings.TrimSpace(line), `\|`, ""), "|") - 1
		switch {
		case width == 0:
			width = cells
			tables++
		case cells != width:
			problems = append(problems, fmt.Sprintf("%s:%d: %d cells, its table's header has %d", file, i+1, cells, width))
		}
	}
	return tables, problems
}

// TestDocs_ABrokenBlockIsReportedAtItsMarkdownLine checks the checker: a
// type error, a syntax error and a missing variable are each reported at the
// Markdown line that holds them, and correct annotated fragments (with
// declarations, an import and a use line) pass.
func TestDocs_ABrokenBlockIsReportedAtItsMarkdownLine(t *testing.T) {
	md := strings.Join([]string{
		"# Title", // 1
		"",        // 2
		"<!-- compile: func(ctx context.Context) error -->", // 3
		"```go",                             // 4
		"if err := ctx.Err(); err != nil {", // 5
		"\treturn err",                      // 6
		"}",                                 // 7
		"return fmt.Errorf(42)",             // 8: type error
		"```",                               // 9
		"",                                  // 10
		"```go",                             // 11
		"x := (1 + )",                       // 12: syntax error
		"```",                               // 13
		"",                                  // 14
		"```go",                             // 15
		"fmt.Println(undeclared)",           // 16: no annotation declares it
		"```",                               // 17
		"",                                  // 18
		"<!-- compile: func(ctx context.Context) error", // 19
		"func step(context.Context) error",              // 20
		"-->",                                           // 21
		"```go",                                         // 22
		"return step(ctx)",                              // 23
		"```",                                           // 24
		"",                                              // 25
		"<!-- compile: func() error",                    // 26
		"import lockmem \"github.com/baton-go/baton/locks/memory\"", // 27
		"use provider", // 28
		"-->",          // 29
		"```go",        // 30
		"provider, err := lockmem.NewProvider(lockmem.Options{})", // 31
		"return err", // 32
		"```",        // 33
	}, "\n")
	blocks, err := extractGoBlocks("broken.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 5 {
		t.Fatalf("found %d blocks, want 5", len(blocks))
	}
	msgs := checkDocBlocks(t, blocks)
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"broken.md:8:", "broken.md:12:", "broken.md:16:"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no error reported at %s; got:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "broken.md:2") || strings.Contains(joined, "broken.md:3") {
		t.Errorf("a correct annotated block (lines 19-33) was reported:\n%s", joined)
	}
	if len(msgs) != 3 {
		t.Errorf("got %d errors, want 3:\n%s", len(msgs), joined)
	}
}

// docBlock is one ```go block of a Markdown file.
type docBlock struct {
	file  string   // slash path, as reported
	line  int      // line of the block's first code line
	lines []string // the code, with the fence's indentation removed
	annot *docAnnotation
}

// docAnnotation is the <!-- compile: ... --> comment above a block.
type docAnnotation struct {
	line      int      // line of "<!-- compile:"
	signature string   // the wrapper's func type; "" for func()
	decls     []string // declaration lines, from line+1 on
	declLines []int
	external  []string
	use       []string // variables the code the fragment leaves out would use
}

var (
	goFence      = regexp.MustCompile("^( *)```go\\s*$")
	anyFence     = regexp.MustCompile("^ *(```|~~~)")
	compileStart = regexp.MustCompile(`^\s*<!--\s*compile:(.*)$`)
	majorVersion = regexp.MustCompile(`^v[0-9]+$`)
)

// extractGoBlocks finds the ```go blocks of a Markdown file and their
// annotations.
func extractGoBlocks(file string, src []byte) ([]*docBlock, error) {
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	var (
		blocks  []*docBlock
		pending *docAnnotation // an annotation waiting for its block
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := compileStart.FindStringSubmatch(line); m != nil {
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: compile annotation is followed by another annotation, not by a ```go block", file, pending.line)
			}
			a, end, err := parseAnnotation(file, lines, i, m[1])
			if err != nil {
				return nil, err
			}
			pending, i = a, end
			continue
		}
		if m := goFence.FindStringSubmatch(line); m != nil {
			indent := m[1]
			b := &docBlock{file: file, line: i + 2, annot: pending}
			pending = nil
			closed := false
			for i++; i < len(lines); i++ {
				if strings.TrimSpace(lines[i]) == "```" {
					closed = true
					break
				}
				b.lines = append(b.lines, strings.TrimPrefix(lines[i], indent))
			}
			if !closed {
				return nil, fmt.Errorf("%s:%d: ```go block is never closed", file, b.line-1)
			}
			blocks = append(blocks, b)
			continue
		}
		if pending != nil && strings.TrimSpace(line) != "" {
			return nil, fmt.Errorf("%s:%d: compile annotation is not followed by a ```go block", file, pending.line)
		}
		if anyFence.MatchString(line) { // another language's block: skip it whole
			fence := strings.TrimSpace(line)[:3]
			for i+1 < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), fence) {
				i++
			}
			i++ // the closing fence
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: compile annotation is not followed by a ```go block", file, pending.line)
	}
	return blocks, nil
}

// parseAnnotation reads the annotation starting at lines[start], whose text
// after "compile:" is first. It returns the index of its last line.
func parseAnnotation(file string, lines []string, start int, first string) (*docAnnotation, int, error) {
	a := &docAnnotation{line: start + 1}
	end := start
	text, closed := strings.CutSuffix(strings.TrimSpace(first), "-->")
	for {
		text = strings.TrimSpace(text)
		switch rest, _ := strings.CutPrefix(text, "use "); {
		case end == start && strings.HasPrefix(text, "func"):
			a.signature = text
		case strings.HasPrefix(text, "external "):
			a.external = append(a.external, strings.Fields(strings.TrimPrefix(text, "external "))...)
		case rest != text:
			a.use = append(a.use, strings.Fields(strings.ReplaceAll(rest, ",", " "))...)
		case text != "":
			a.decls = append(a.decls, text)
			a.declLines = append(a.declLines, end+1)
		}
		if closed {
			break
		}
		end++
		if end >= len(lines) {
			return nil, 0, fmt.Errorf("%s:%d: compile annotation is never closed with -->", file, a.line)
		}
		text, closed = strings.CutSuffix(strings.TrimSpace(lines[end]), "-->")
	}
	if a.signature != "" {
		ft, err := parser.ParseExpr(a.signature)
		if _, isFunc := ft.(*ast.FuncType); err != nil || !isFunc {
			return nil, 0, fmt.Errorf("%s:%d: compile annotation: %q is not a function type such as func(ctx context.Context) error", file, a.line, a.signature)
		}
	}
	return a, end, nil
}

// chunk is a run of a fragment's lines that go to one place: file scope
// (decl) or the wrapper's body.
type chunk struct {
	decl, imports bool
	line          int
	lines         []string
}

// splitChunks cuts code into declarations and statements at column 0.
func splitChunks(code []string, firstLine int) []chunk {
	var out []chunk
	for i, l := range code {
		opensDecl := strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "func ") ||
			strings.HasPrefix(l, "import ") || strings.HasPrefix(l, "import(")
		opensStmt := !opensDecl && l != "" && l[0] != ' ' && l[0] != '\t' &&
			!strings.HasPrefix(l, "}") && !strings.HasPrefix(l, ")") && !strings.HasPrefix(l, "//")
		switch {
		case len(out) == 0:
			out = append(out, chunk{decl: opensDecl, line: firstLine + i})
		case opensDecl, opensStmt && out[len(out)-1].decl:
			out = append(out, chunk{decl: opensDecl, line: firstLine + i})
		}
		c := &out[len(out)-1]
		if opensDecl && strings.HasPrefix(l, "import") {
			c.imports = true
		}
		c.lines = append(c.lines, l)
	}
	return out
}

// assemble writes the block as a Go file, with //line directives mapping
// every line of the block (and of its annotation) back to the Markdown file.
// imports are added as they are given: name -> path.
func (b *docBlock) assemble(imports map[string]string) string {
	var w strings.Builder
	at := func(line int) { fmt.Fprintf(&w, "//line %s:%d:1\n", b.file, line) }
	header := b.line - 1 // the fence: synthetic lines are reported there
	if b.annot != nil {
		header = b.annot.line
	}
	if isWholeFile(b.lines) {
		at(b.line)
		w.WriteString(strings.Join(b.lines, "\n"))
		w.WriteString("\n")
		return w.String()
	}
	var decls []chunk
	if b.annot != nil {
		for i, d := range b.annot.decls {
			decls = append(decls, splitChunks([]string{d}, b.annot.declLines[i])...)
		}
	}
	chunks := splitChunks(b.lines, b.line)
	decls = append(decls, chunks...)

	at(header)
	w.WriteString("package docblock\n")
	names := make([]string, 0, len(imports))
	for n := range imports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&w, "import %s %q\n", n, imports[n])
	}
	for _, c := range decls { // imports first, as Go requires
		if c.decl && c.imports {
			at(c.line)
			w.WriteString(strings.Join(c.lines, "\n") + "\n")
		}
	}
	for _, c := range decls {
		if c.decl && !c.imports {
			at(c.line)
			w.WriteString(strings.Join(c.lines, "\n") + "\n")
		}
	}
	sig, results := "func()", false
	if b.annot != nil && b.annot.signature != "" {
		sig = b.annot.signature
		ft, _ := parser.ParseExpr(sig)
		results = ft.(*ast.FuncType).Results.NumFields() > 0
	}
	hasStmts := slices.ContainsFunc(chunks, func(c chunk) bool { return !c.decl })
	if !hasStmts && (b.annot == nil || b.annot.signature == "") {
		return w.String()
	}
	at(header)
	w.WriteString("func _" + strings.TrimPrefix(sig, "func") + " {\n")
	for _, c := range chunks {
		if !c.decl {
			at(c.line)
			w.WriteString(strings.Join(c.lines, "\n") + "\n")
		}
	}
	if results {
		at(b.line + len(b.lines)) // the closing fence
		w.WriteString("panic(\"the fragment ends without returning\")\n")
	}
	w.WriteString("}\n")
	return w.String()
}

func isWholeFile(code []string) bool {
	for _, l := range code {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "//") {
			continue
		}
		return strings.HasPrefix(t, "package ")
	}
	return false
}

// checkDocBlocks type-checks the blocks and returns one message per error,
// each starting with the Markdown file and line.
func checkDocBlocks(t *testing.T, blocks []*docBlock) []string {
	t.Helper()
	fset := token.NewFileSet()
	var msgs []string
	type parsed struct {
		b    *docBlock
		file *ast.File
	}
	var ok []parsed
	external := map[string]bool{}
	paths := map[string]bool{}
	for _, b := range blocks {
		if b.annot != nil && isWholeFile(b.lines) {
			msgs = append(msgs, fmt.Sprintf("%s:%d: compile annotation above a whole file (it has a package clause): remove one or the other", b.file, b.annot.line))
			continue
		}
		imports, err := b.imports()
		if err != nil {
			msgs = append(msgs, errorList(err)...)
			continue
		}
		f, err := parser.ParseFile(fset, "docblock.go", b.assemble(imports), parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			msgs = append(msgs, errorList(err)...)
			continue
		}
		for _, p := range externalPaths(b) {
			external[p] = true
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if external[p] && spec.Name == nil {
				// A failed import gets a made-up name; give it the real one
				// so that its uses stay unchecked instead of undefined.
				spec.Name = ast.NewIdent(guessPackageName(p))
			}
			paths[p] = true
		}
		ok = append(ok, parsed{b, f})
	}
	if len(ok) == 0 {
		return msgs
	}
	var list []string
	for p := range paths {
		if !external[p] {
			list = append(list, p)
		}
	}
	sort.Strings(list)
	exports := exportData(t, list)
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		if file, found := exports[p]; found {
			return os.Open(file)
		}
		if external[p] {
			return nil, errExternal
		}
		return nil, fmt.Errorf("this module cannot build %s; if it belongs to another module, name it on an `external` line of the block's compile annotation", p)
	})
	for _, p := range ok {
		ignore := map[string]bool{}
		if a := p.b.annot; a != nil {
			for _, e := range a.external {
				ignore[e] = true
			}
			for _, u := range a.use {
				ignore["declared and not used: "+u] = true
			}
		}
		conf := types.Config{
			Importer: imp,
			Error: func(err error) {
				var te types.Error
				if errors.As(err, &te) {
					if ignore[te.Msg] {
						return // named on a use line
					}
					if rest, found := strings.CutPrefix(te.Msg, "could not import "); found &&
						strings.Contains(te.Msg, errExternal.Error()) && ignore[strings.Fields(rest)[0]] {
						return // named on an external line: its names stay unchecked
					}
				}
				msgs = append(msgs, err.Error())
			},
		}
		_, _ = conf.Check(docPackagePath, fset, []*ast.File{p.file}, nil)
	}
	return msgs
}

var errExternal = errors.New("declared external to this module")

func externalPaths(b *docBlock) []string {
	if b.annot == nil {
		return nil
	}
	return b.annot.external
}

// imports works out the imports a fragment needs: the package names it
// uses as selectors and declares nowhere, resolved through docImports and the
// annotation's external paths.
func (b *docBlock) imports() (map[string]string, error) {
	if isWholeFile(b.lines) {
		return nil, nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "docblock.go", b.assemble(nil), parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	known := map[string]string{}
	for n, p := range docImports {
		known[n] = p
	}
	for _, p := range externalPaths(b) {
		known[guessPackageName(p)] = p
	}
	declared := map[string]bool{}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.TypeSpec:
			declared[n.Name.Name] = true
		case *ast.FuncDecl:
			if n.Recv == nil {
				declared[n.Name.Name] = true
			}
		case *ast.ImportSpec:
			p, _ := strconv.Unquote(n.Path.Value)
			if n.Name != nil {
				declared[n.Name.Name] = true
			} else {
				declared[guessPackageName(p)] = true
			}
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	out := map[string]string{}
	for n := range used {
		if p, ok := known[n]; ok && !declared[n] {
			out[n] = p
		}
	}
	return out, nil
}

// guessPackageName is the name a package is imported as when its import
// names none: its last path element, skipping a major version suffix.
func guessPackageName(importPath string) string {
	for n, p := range docImports {
		if p == importPath {
			return n
		}
	}
	elems := strings.Split(importPath, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && majorVersion.MatchString(name) {
		name = elems[len(elems)-2]
	}
	return strings.TrimSuffix(strings.TrimPrefix(name, "go-"), "-go")
}

// exportData builds (or finds in the build cache) the export data of the
// packages and everything they import, with one `go list`.
func exportData(t *testing.T, importPaths []string) map[string]string {
	t.Helper()
	if len(importPaths) == 0 {
		return nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the packages the docs import: %v", err)
	}
	args := []string{"list", "-e", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	// Build the way this test binary was built, so that `go test -race
	// ./...` finds the packages it compiled already in the build cache.
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "-race" && s.Value == "true":
				args = append(args, "-race")
			case s.Key == "-tags" && s.Value != "":
				args = append(args, "-tags="+s.Value)
			}
		}
	}
	args = append(args, importPaths...)
	cmd := exec.CommandContext(t.Context(), goCmd, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), "\t", 2)
		if len(fields) == 2 && fields[1] != "" {
			exports[fields[0]] = fields[1]
		}
	}
	return exports
}

// errorList turns a parse error into one message: the first error of the
// list, since the parser's later ones follow from it.
func errorList(err error) []string {
	var list scanner.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return []string{list[0].Error()}
	}
	return []string{err.Error()}
}
