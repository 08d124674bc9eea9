package baton_test

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/baton-go/baton"

// drivers may never appear under core/, not even in its tests.
var drivers = []string{
	"github.com/jackc/pgx",
	"github.com/uptrace/bun",
	"github.com/redis/go-redis",
	"github.com/testcontainers/testcontainers-go",
}

// coreTestOnly are the packages core's tests may use besides the standard
// library and core itself: the leak checker, and the in-memory reference
// adapters (which import no driver either), so tests need no fakes of
// their own.
var coreTestOnly = []string{"go.uber.org/goleak", module + "/backends/memory", module + "/locks/memory"}

// TestCore_ImportsOnlyTheStandardLibraryAndCore keeps the rule that makes
// adapters pluggable: core/... holds the logic and knows no driver. Because
// every core import is either the standard library or another core package,
// the rule also holds for everything core depends on transitively.
func TestCore_ImportsOnlyTheStandardLibraryAndCore(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("core", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, d := range drivers {
				if strings.HasPrefix(p, d) {
					t.Errorf("%s imports the driver %s; core must not know any driver", path, p)
				}
			}
			switch {
			case isStdlib(p), strings.HasPrefix(p, module+"/core/"):
			case isTest && hasPrefix(p, coreTestOnly):
			default:
				t.Errorf("%s imports %s; core may import only the standard library and core/...", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no Go files found under core/")
	}
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func hasPrefix(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// TestCmdBaton_MainHoldsTheCommandLineOnly keeps cmd/baton's package main
// to the command tree and its flags: what the commands do is
// cmd/baton/internal/ops (and the demo internal/demo), so main speaks to no
// driver and stays short enough to read as the CLI's table of contents.
func TestCmdBaton_MainHoldsTheCommandLineOnly(t *testing.T) {
	const maxLines = 1500
	fset := token.NewFileSet()
	files, err := filepath.Glob("cmd/baton/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if hasPrefix(p, drivers) {
				t.Errorf("%s imports the driver %s; the commands' work belongs in cmd/baton/internal/ops", path, p)
			}
		}
	}
	if lines == 0 {
		t.Fatal("no Go files found in cmd/baton")
	}
	if lines >= maxLines {
		t.Errorf("cmd/baton's package main has %d lines, want fewer than %d: move what the commands do to cmd/baton/internal/ops", lines, maxLines)
	}
}
