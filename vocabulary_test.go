package baton_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The module speaks one vocabulary (core/config's package documentation
// states it). These tests read every package of the repository, the nested
// modules' included, with go/parser, and fail on what contradicts it:
//
//   - an exported New… function of a public package that does not return
//     (T, error);
//   - a New… function taking a …Options in core/, or a …Config outside it;
//   - an exported type with a Start method, or a Run that is not
//     Run(ctx context.Context) error;
//   - a withDefaults or validate method with a pointer receiver (validate
//     must not fill anything in, and withDefaults returns a filled-in copy);
//   - a message starting "baton/<name>:" whose name is not the package's
//     own, so an error always names the package that returned it.

// notConstructors are the New… functions that construct a value, not a
// component, and cannot fail: each with the reason.
var notConstructors = map[string]string{
	"core/outbox.NewID":      "an entry id drawn from the clock and crypto/rand; nothing to refuse",
	"core/workrow.NewLockID": "a claim's lock id drawn from crypto/rand; nothing to refuse",
}

// goPackage is the non-test files of one directory.
type goPackage struct {
	dir   string // slash-separated, relative to the repository root
	name  string
	files []*ast.File
	fset  *token.FileSet
}

// public reports whether code outside the module can import the package.
func (p goPackage) public() bool {
	return p.name != "main" && !slices.Contains(strings.Split(p.dir, "/"), "internal")
}

func (p goPackage) core() bool { return strings.HasPrefix(p.dir, "core/") }

func (p goPackage) pos(n ast.Node) string {
	return p.fset.Position(n.Pos()).String()
}

// repositoryPackages parses every directory holding Go files, test files
// and testdata left out.
func repositoryPackages(t *testing.T) []goPackage {
	t.Helper()
	byDir := map[string]*goPackage{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		p := byDir[dir]
		if p == nil {
			p = &goPackage{dir: dir, name: f.Name.Name, fset: fset}
			byDir[dir] = p
		}
		p.files = append(p.files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []goPackage
	for _, p := range byDir {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b goPackage) int { return strings.Compare(a.dir, b.dir) })
	if len(out) < 20 {
		t.Fatalf("found %d packages; the walk missed the module", len(out))
	}
	return out
}

// typeName is the name of a type expression without its package, pointer
// or type arguments: "Config" for Config[K, R], "Client" for *clientv3.Client.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	}
	return ""
}

// localType is the name of a type declared in the package itself (Config,
// *Config, Config[K, R]), or "" for any other type expression.
func localType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return localType(x.X)
	case *ast.IndexExpr:
		return localType(x.X)
	case *ast.IndexListExpr:
		return localType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// takesTesting reports whether a function's first parameter is a
// testing.TB, *testing.T or *testing.B: a test helper, which reports
// failure through it.
func takesTesting(ft *ast.FuncType) bool {
	if ft.Params == nil || len(ft.Params.List) == 0 {
		return false
	}
	e := ft.Params.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "testing"
}

func resultCount(ft *ast.FuncType) int {
	if ft.Results == nil {
		return 0
	}
	n := 0
	for _, f := range ft.Results.List {
		n += max(1, len(f.Names))
	}
	return n
}

func lastResultIsError(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return false
	}
	id, ok := ft.Results.List[len(ft.Results.List)-1].Type.(*ast.Ident)
	return ok && id.Name == "error"
}

// constructorProblems lists what is wrong with the exported New…
// functions of p.
func constructorProblems(p goPackage) (problems []string, checked int) {
	if !p.public() {
		return nil, 0
	}
	for _, f := range p.files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || !strings.HasPrefix(fn.Name.Name, "New") {
				continue
			}
			key := p.dir + "." + fn.Name.Name
			if _, ok := notConstructors[key]; ok || takesTesting(fn.Type) {
				continue
			}
			checked++
			if resultCount(fn.Type) != 2 || !lastResultIsError(fn.Type) {
				problems = append(problems, fmt.Sprintf("%s: %s does not return (T, error)", p.pos(fn), key))
			}
			if fn.Type.Params == nil {
				continue
			}
			for _, param := range fn.Type.Params.List {
				name := localType(param.Type)
				switch {
				case p.core() && strings.HasSuffix(name, "Options"):
					problems = append(problems, fmt.Sprintf("%s: %s takes %s; a core component takes a Config", p.pos(fn), key, name))
				case !p.core() && strings.HasSuffix(name, "Config"):
					problems = append(problems, fmt.Sprintf("%s: %s takes %s; an adapter's constructor takes Options", p.pos(fn), key, name))
				}
			}
		}
	}
	return problems, checked
}

// isContextContext reports whether e is context.Context.
func isContextContext(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "context" && sel.Sel.Name == "Context"
}

// lifecycleProblems lists the exported types of p with a Start method, or
// a Run of another shape than Run(ctx context.Context) error.
func lifecycleProblems(p goPackage) (problems []string, runs int) {
	if !p.public() {
		return nil, 0
	}
	for _, f := range p.files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			recv := typeName(fn.Recv.List[0].Type)
			if !ast.IsExported(recv) {
				continue
			}
			switch fn.Name.Name {
			case "Start":
				problems = append(problems, fmt.Sprintf("%s: %s.%s has Start; a long-running component blocks in Run(ctx) until ctx ends",
					p.pos(fn), p.dir, recv))
			case "Run":
				runs++
				ps := fn.Type.Params.List
				if len(ps) != 1 || len(ps[0].Names) > 1 || !isContextContext(ps[0].Type) ||
					resultCount(fn.Type) != 1 || !lastResultIsError(fn.Type) {
					problems = append(problems, fmt.Sprintf("%s: %s.%s.Run is not Run(ctx context.Context) error", p.pos(fn), p.dir, recv))
				}
			}
		}
	}
	return problems, runs
}

// defaultsProblems lists the withDefaults and validate methods of p, any
// package, with a pointer receiver, or a withDefaults that does not return
// its receiver's type.
func defaultsProblems(p goPackage) (problems []string, checked int) {
	for _, f := range p.files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			name := fn.Name.Name
			if name != "withDefaults" && name != "WithDefaults" && name != "validate" && name != "Validate" {
				continue
			}
			checked++
			rt := fn.Recv.List[0].Type
			recv := typeName(rt)
			if _, ptr := rt.(*ast.StarExpr); ptr {
				problems = append(problems, fmt.Sprintf("%s: %s.%s.%s has a pointer receiver; %s", p.pos(fn), p.dir, recv, name,
					map[bool]string{true: "withDefaults returns a filled-in copy", false: "validate only validates, it fills nothing in"}[strings.EqualFold(name, "withDefaults")]))
			}
			if strings.EqualFold(name, "withDefaults") && (resultCount(fn.Type) != 1 || typeName(fn.Type.Results.List[0].Type) != recv) {
				problems = append(problems, fmt.Sprintf("%s: %s.%s.%s does not return a %s", p.pos(fn), p.dir, recv, name, recv))
			}
		}
	}
	return problems, checked
}

// messagePrefix is how baton's messages begin: "baton/<package>:".
// runCheck runs check over every package, reports its problems, and fails
// when it checked fewer than least things (the walk missed some).
func runCheck(t *testing.T, what string, least int, check func(goPackage) ([]string, int)) {
	t.Helper()
	total := 0
	for _, p := range repositoryPackages(t) {
		problems, n := check(p)
		total += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	if total < least {
		t.Fatalf("checked %d %s, want at least %d: the walk missed some", total, what, least)
	}
	t.Logf("checked %d %s", total, what)
}

// messagePrefix matches a message that names its package: "baton/name:".
var messagePrefix = regexp.MustCompile(`^baton/([A-Za-z0-9_]+):`)

// prefixProblems lists the string literals of p that start with a
// package's name, "baton/name:", naming another package than p: a
// package's errors start "baton/" and its own name. (Messages built at run
// time, as the PostgreSQL adapters' shared code builds them from the
// adapter's name, are not literals, and are left to the adapters' tests.)
func prefixProblems(p goPackage) (problems []string, checked int) {
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			m := messagePrefix.FindStringSubmatch(s)
			if m == nil {
				return true
			}
			checked++
			if m[1] != p.name {
				problems = append(problems, fmt.Sprintf("%s: %q starts with baton/%s: in package %s (%s); start it with baton/%s:",
					p.pos(lit), s, m[1], p.name, p.dir, p.name))
			}
			return true
		})
	}
	return problems, checked
}

func TestVocabulary_MessagesNameTheirOwnPackage(t *testing.T) {
	runCheck(t, "messages naming their package", 100, prefixProblems)
}

func TestVocabulary_ConstructorsAreNewXReturningTAndError(t *testing.T) {
	runCheck(t, "exported constructors", 25, constructorProblems)
}

func TestVocabulary_LongRunningComponentsRunAndNeverStart(t *testing.T) {
	runCheck(t, "Run methods", 5, lifecycleProblems)
}

func TestVocabulary_WithDefaultsReturnsACopyAndValidateOnlyValidates(t *testing.T) {
	runCheck(t, "withDefaults and validate methods", 20, defaultsProblems)
}

// TestVocabulary_TheChecksCatchWhatTheyAreFor runs the checks over a
// package that breaks every rule once.
func TestVocabulary_TheChecksCatchWhatTheyAreFor(t *testing.T) {
	src := `package thing

import "context"

type Config struct{}
type Options struct{}
type Manager struct{}

func NewManager(cfg Config) *Manager { return nil }
func NewWorker(opts Options) (*Manager, error) { return nil, nil }
func NewPair() (*Manager, *Manager) { return nil, nil }
func NewHelper(t testing.TB) *Manager { return nil }
func (m *Manager) Start(ctx context.Context) error { return nil }
func (m *Manager) Run() {}
func (c *Config) validate() error { return nil }
func (c Config) withDefaults() Options { return Options{} }
func (o Options) withDefaults() Options { return o }
func (o Options) validate() error { return nil }

var errWrong = errors.New("baton/other: a message of another package")
var errRight = fmt.Errorf("baton/thing: a message of this one")
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "thing.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	core := goPackage{dir: "core/thing", name: "thing", files: []*ast.File{f}, fset: fset}
	adapter := core
	adapter.dir = "backends/thing"

	want := map[string][]string{
		"constructors in core": {"NewManager does not return (T, error)", "NewWorker takes Options", "NewPair does not return"},
		"constructors outside": {"NewManager does not return (T, error)", "NewManager takes Config", "NewPair does not return"},
		"lifecycle":            {"Manager has Start", "Manager.Run is not Run(ctx"},
		"defaults":             {"Config.validate has a pointer receiver", "Config.withDefaults does not return a Config"},
		"prefixes":             {"starts with baton/other: in package thing"},
	}
	cc, _ := constructorProblems(core)
	ca, _ := constructorProblems(adapter)
	lc, _ := lifecycleProblems(core)
	dc, _ := defaultsProblems(core)
	pc, _ := prefixProblems(core)
	got := map[string][]string{"constructors in core": cc, "constructors outside": ca, "lifecycle": lc, "defaults": dc, "prefixes": pc}
	for check, wants := range want {
		joined := strings.Join(got[check], "\n")
		for _, w := range wants {
			if !strings.Contains(joined, w) {
				t.Errorf("%s: no problem mentions %q; got:\n%s", check, w, joined)
			}
		}
		if len(got[check]) != len(wants) {
			t.Errorf("%s: %d problems, want %d:\n%s", check, len(got[check]), len(wants), joined)
		}
	}
	if internal := (goPackage{dir: "internal/thing", name: "thing", files: []*ast.File{f}, fset: fset}); true {
		if p, _ := constructorProblems(internal); len(p) != 0 {
			t.Errorf("an internal package's constructors were checked: %v", p)
		}
	}
}
