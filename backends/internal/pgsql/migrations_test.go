package pgsql

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMigrationFilesAreNamedForGooseAndGolangMigrate(t *testing.T) {
	entries, err := fs.ReadDir(Migrations(), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("Migrations() holds no files")
	}
	// golang-migrate: {version}_{title}.up.sql; goose: digits before the
	// first underscore, .sql extension. Four digits, no down files.
	name := regexp.MustCompile(`^[0-9]{4}_[a-z0-9_]+\.up\.sql$`)
	for i, e := range entries {
		if !name.MatchString(e.Name()) {
			t.Errorf("%s: want a name like 0001_title.up.sql", e.Name())
		}
		if want := i + 1; !strings.HasPrefix(e.Name(), zeroPad(want)+"_") {
			t.Errorf("%s: want version %04d (versions start at 1, no gaps)", e.Name(), want)
		}
	}
}

func zeroPad(n int) string { return fmt.Sprintf("%04d", n) }

func TestMigrationFilesStartWithGooseUpAndHoldOnlyPlainDDL(t *testing.T) {
	// Rules that keep one file valid for Migrate, goose and golang-migrate:
	// the goose annotation first; no schema named (objects follow
	// search_path); no transaction control (each tool wraps the file itself);
	// no goose Down section (golang-migrate and Migrate would run it).
	forbidden := map[string]*regexp.Regexp{
		"names a schema":           regexp.MustCompile(`(?i)\bschema\b|\bsearch_path\b|\w\.baton_`),
		"controls the transaction": regexp.MustCompile(`(?im)^\s*(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION)\b`),
		"has a goose Down section": regexp.MustCompile(`(?i)\+goose\s+Down`),
	}
	err := fs.WalkDir(Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(Migrations(), path)
		if err != nil {
			return err
		}
		text := string(body)
		if !strings.HasPrefix(text, "-- +goose Up\n") {
			t.Errorf("%s: the first line must be exactly %q", path, "-- +goose Up")
		}
		// Comments may explain anything; check only the statements.
		var code []string
		for line := range strings.SplitSeq(text, "\n") {
			if before, _, _ := strings.Cut(line, "--"); strings.TrimSpace(before) != "" {
				code = append(code, before)
			}
		}
		for what, re := range forbidden {
			if m := re.FindString(strings.Join(code, "\n")); m != "" {
				t.Errorf("%s %s (%q)", path, what, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEmbeddedMigrationsLoadInVersionOrder(t *testing.T) {
	if len(migrations) == 0 {
		t.Fatal("no migrations loaded")
	}
	for i, m := range migrations {
		if m.Version != i+1 {
			t.Errorf("migrations[%d].Version = %d, want %d", i, m.Version, i+1)
		}
		if !strings.HasPrefix(m.File, zeroPad(m.Version)+"_"+m.Title+".up.sql") {
			t.Errorf("migrations[%d]: file %q does not match version %d and title %q", i, m.File, m.Version, m.Title)
		}
	}
	if latestVersion != migrations[len(migrations)-1].Version {
		t.Errorf("latestVersion = %d, want %d", latestVersion, migrations[len(migrations)-1].Version)
	}
	if migrations[0].File != "0001_lock_fences.up.sql" {
		t.Errorf("first migration is %q, want 0001_lock_fences.up.sql", migrations[0].File)
	}
}

func TestLoadMigrationsRejectsMalformedFiles(t *testing.T) {
	const ok = "-- +goose Up\nCREATE TABLE baton_x (id int);\n"
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"empty directory", map[string]string{}, "no migration files"},
		{"no version prefix", map[string]string{"lock_fences.up.sql": ok}, "the name must look like"},
		{"short version", map[string]string{"1_lock_fences.up.sql": ok}, "the name must look like"},
		{"down file", map[string]string{"0001_a.up.sql": ok, "0001_a.down.sql": ok}, "the name must look like"},
		{"upper-case title", map[string]string{"0001_Lock.up.sql": ok}, "the name must look like"},
		{"gap", map[string]string{"0001_a.up.sql": ok, "0003_c.up.sql": ok}, "version 3, want 2"},
		{"duplicate", map[string]string{"0001_a.up.sql": ok, "0001_b.up.sql": ok}, "version 1, want 2"},
		{"starts at two", map[string]string{"0002_a.up.sql": ok}, "version 2, want 1"},
		{"no goose annotation", map[string]string{"0001_a.up.sql": "CREATE TABLE baton_x (id int);\n"}, "the first line must be"},
		{"annotation not first", map[string]string{"0001_a.up.sql": "-- hello\n-- +goose Up\nCREATE TABLE baton_x (id int);\n"}, "the first line must be"},
		{"no final semicolon", map[string]string{"0001_a.up.sql": "-- +goose Up\nCREATE TABLE baton_x (id int)\n"}, "closing semicolon"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{"m": &fstest.MapFile{Mode: fs.ModeDir}}
			for name, body := range c.files {
				fsys["m/"+name] = &fstest.MapFile{Data: []byte(body)}
			}
			_, err := loadMigrations(fsys, "m")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("loadMigrations: err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadMigrationsAcceptsWellFormedFiles(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0001_first.up.sql":      {Data: []byte("-- +goose Up\nCREATE TABLE baton_a (id int);\n")},
		"m/0002_second_one.up.sql": {Data: []byte("-- +goose Up\r\nCREATE TABLE baton_b (id int);")},
	}
	ms, err := loadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{ms[0].Title, ms[1].Title}
	if !slices.Equal(got, []string{"first", "second_one"}) || ms[1].Version != 2 {
		t.Fatalf("loaded %+v", ms)
	}
}

func TestSchemaSQLHasEveryMigrationInOrderUnderAHeader(t *testing.T) {
	text := SchemaSQL()
	last := -1
	for _, m := range migrations {
		header := "-- Migration " + zeroPad(m.Version) + ": " + m.Title + " (" + m.File + ")"
		at := strings.Index(text, header)
		if at < 0 {
			t.Fatalf("SchemaSQL has no header %q", header)
		}
		if at < last {
			t.Errorf("migration %s appears out of order", m.File)
		}
		last = at
		body := strings.TrimSpace(strings.TrimPrefix(m.SQL, "-- +goose Up"))
		if !strings.Contains(text, body) {
			t.Errorf("SchemaSQL lacks the body of %s", m.File)
		}
	}
	if strings.Contains(text, "+goose") {
		t.Error("SchemaSQL keeps goose annotations; they mean nothing in one script")
	}
	if !strings.Contains(text, "CREATE TABLE IF NOT EXISTS baton_schema_migrations") {
		t.Error("SchemaSQL does not create baton_schema_migrations")
	}
}

func TestValidateSchemaNameSaysWhatIsWrong(t *testing.T) {
	cases := []struct {
		name, want string
	}{
		{"", "it is empty"},
		{strings.Repeat("s", 64), "64 bytes long and the limit is 63"},
		{"bad\x00name", "NUL byte"},
		{"bad\xffname", "not valid UTF-8"},
		{"   ", "only white space"},
		{"pg_baton", `reserved for PostgreSQL's system schemas`},
	}
	for _, c := range cases {
		err := ValidateSchemaName("MigrateOptions.Schema", c.name)
		if !errors.Is(err, ErrInvalidSchemaName) {
			t.Errorf("ValidateSchemaName(%q) = %v, want ErrInvalidSchemaName", c.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "MigrateOptions.Schema") || !strings.Contains(msg, c.want) {
			t.Errorf("ValidateSchemaName(%q) = %q, want the field name and %q", c.name, msg, c.want)
		}
	}
	for _, good := range []string{"baton", `My "odd" Schema`, strings.Repeat("s", 63), "Ünïcode", "PG_upper"} {
		if err := ValidateSchemaName("MigrateOptions.Schema", good); err != nil {
			t.Errorf("ValidateSchemaName(%q) = %v, want nil", good, err)
		}
	}
}

func TestMigrationLockKeyIsStableAndPerSchema(t *testing.T) {
	// The key is part of the contract between baton versions: nodes running
	// different releases must contend on the same lock.
	if got, want := MigrationLockKey("baton"), MigrationLockKey("baton"); got != want {
		t.Fatalf("key not deterministic: %d vs %d", got, want)
	}
	if MigrationLockKey("baton") == MigrationLockKey("Baton") {
		t.Error("schemas differing in case share a lock key")
	}
	const pinned int64 = -2379468976901994203 // FNV-1a 64 of "baton/postgres migrate\x1fbaton"
	if got := MigrationLockKey("baton"); got != pinned {
		t.Errorf("MigrationLockKey(%q) = %d, want the pinned %d; changing it lets old and new binaries migrate at once", "baton", got, pinned)
	}
}

func TestCompareShapesNamesEveryDifference(t *testing.T) {
	expected := []tableShape{
		{
			Name: "t1",
			Columns: []columnShape{
				{Name: "a", Type: "text", NotNull: true},
				{Name: "b", Type: "bigint", NotNull: true},
				{Name: "c", Type: "jsonb"},
				{Name: "d", Type: "uuid", NotNull: true},
			},
			Indexes: []indexShape{
				{Name: "t1_pkey", Columns: []string{"a"}, Unique: true},
				{Name: "t1_b_c", Columns: []string{"b", "c"}},
				{Name: "t1_d", Columns: []string{"d"}, Unique: true},
				{Name: "t1_gone", Columns: []string{"a"}},
			},
		},
		{Name: "t2", Columns: []columnShape{{Name: "x", Type: "text"}}},
	}
	actual := map[string]*actualTable{
		"t1": {
			Columns: map[string]columnShape{
				"a":     {Name: "a", Type: "text", NotNull: true},
				"b":     {Name: "b", Type: "integer", NotNull: false},
				"c":     {Name: "c", Type: "jsonb", NotNull: true},
				"extra": {Name: "extra", Type: "text"},
			},
			Indexes: map[string]indexShape{
				"t1_pkey": {Name: "t1_pkey", Columns: []string{"a"}, Unique: true},
				"t1_b_c":  {Name: "t1_b_c", Columns: []string{"c", "b"}},
				"t1_d":    {Name: "t1_d", Columns: []string{"d"}},
				"t1_mine": {Name: "t1_mine", Columns: []string{"extra"}},
			},
		},
	}
	got := texts(compareShapes(expected, actual))
	want := []string{
		"column t1.b has type integer, want bigint",
		"column t1.b is nullable, want NOT NULL",
		"column t1.c is NOT NULL, want nullable",
		"column t1.d is missing (want uuid NOT NULL)",
		"index t1_b_c on t1 has columns (c, b), want (b, c)",
		"index t1_d on t1 is not unique, want unique",
		"index t1_gone on t1 is missing (want not unique (a))",
		"table t2 is missing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("compareShapes:\n got %q\nwant %q", got, want)
	}
}

func TestSchemaErrorListsEveryProblemOnItsOwnLine(t *testing.T) {
	err := error(&SchemaError{Schema: "app", Problems: []string{"table a is missing", "column b.c is missing"}})
	if !errors.Is(err, ErrSchemaMismatch) {
		t.Error("errors.Is(*SchemaError, ErrSchemaMismatch) = false")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("Error() has %d lines, want a summary and one per problem:\n%s", len(lines), err)
	}
	if !strings.Contains(lines[0], `"app"`) || !strings.Contains(lines[0], "2 problems") {
		t.Errorf("summary line %q lacks the schema or the count", lines[0])
	}
	if !strings.HasSuffix(lines[1], "table a is missing") || !strings.HasSuffix(lines[2], "column b.c is missing") {
		t.Errorf("problem lines = %q", lines[1:])
	}
	var se *SchemaError
	if !errors.As(err, &se) || len(se.Problems) != 2 {
		t.Errorf("errors.As did not recover the problems")
	}
}
func TestCompareShapesNamesAPartialIndexPredicateAndADescendingColumn(t *testing.T) {
	expected := []tableShape{{
		Name: "t",
		Indexes: []indexShape{
			{Name: "t_partial", Columns: []string{"a"}, Predicate: "b IS NOT NULL"},
			{Name: "t_full", Columns: []string{"a"}},
			{Name: "t_desc", Columns: []string{"a DESC", "b"}},
		},
	}}
	actual := map[string]*actualTable{"t": {Indexes: map[string]indexShape{
		"t_partial": {Name: "t_partial", Columns: []string{"a"}},
		"t_full":    {Name: "t_full", Columns: []string{"a"}, Predicate: "b > 0"},
		"t_desc":    {Name: "t_desc", Columns: []string{"a", "b"}},
	}}}
	want := []string{
		"index t_partial on t covers every row, want only rows WHERE b IS NOT NULL",
		"index t_full on t covers only rows WHERE b > 0, want every row",
		"index t_desc on t has columns (a, b), want (a DESC, b)",
	}
	if got := texts(compareShapes(expected, actual)); !slices.Equal(got, want) {
		t.Errorf("compareShapes:\n got %q\nwant %q", got, want)
	}
	if got := describeIndex(expected[0].Indexes[0]); got != "not unique (a) WHERE b IS NOT NULL" {
		t.Errorf("describeIndex = %q", got)
	}
}

func TestSplitStatementsCutsWhereGooseDoes(t *testing.T) {
	got := splitStatements([]migration{{Version: 7, SQL: "-- +goose Up\n-- a comment; with a semicolon\nCREATE TABLE a (x int);\n" +
		"CREATE INDEX a_x\n    ON a (x);\n-- +goose StatementBegin\nCREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;\n-- +goose StatementEnd\n"}})
	want := []ddl{{0, "CREATE TABLE a (x int)", 7}, {1, "CREATE INDEX a_x ON a (x)", 7}, {2, "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql", 7}}
	if !slices.Equal(got, want) {
		t.Errorf("splitStatements = %+v, want %+v", got, want)
	}
}
