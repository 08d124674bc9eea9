package pgsql

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
)

// migrationFS holds the migration files. They are plain SQL so that baton's
// own Migrate, goose and golang-migrate can all run the same bytes.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationsDir is the directory of migrationFS that holds the files.
const migrationsDir = "migrations"

// gooseUp is the line every migration file starts with. goose refuses SQL
// files without it; to golang-migrate and to Migrate it is a comment.
const gooseUp = "-- +goose Up"

// migrationFileName is the only accepted file name: a four-digit version, an
// underscore, a lower-case title, and ".up.sql". golang-migrate needs the
// "{version}_{title}.up.sql" form; goose reads the version from the digits
// before the first underscore. There are no down files, so goose never sees
// two files with one version.
var migrationFileName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9]+(?:_[a-z0-9]+)*)\.up\.sql$`)

// migration is one embedded migration file.
type migration struct {
	Version int    // from the file name's numeric prefix
	Title   string // from the file name, e.g. "lock_fences"
	File    string // the file name
	SQL     string // the whole file
}

// migrations are the embedded migrations in version order. The files are
// compiled into the binary, so a malformed one is a defect of this package
// that every test run catches; failing at init keeps it from ever reaching a
// database.
var migrations = mustLoadMigrations(migrationFS, migrationsDir)

// latestVersion is the version of the last migration this code knows.
var latestVersion = migrations[len(migrations)-1].Version

func mustLoadMigrations(fsys fs.FS, dir string) []migration {
	ms, err := loadMigrations(fsys, dir)
	if err != nil {
		panic(err)
	}
	return ms
}

// loadMigrations reads and checks the migration files in dir: every file is
// named NNNN_title.up.sql, starts with the goose annotation and ends with a
// semicolon, and the versions run 1, 2, 3, ... without gaps or duplicates.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("baton: read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries { // fs.ReadDir sorts by name, hence by version
		name := e.Name()
		m := migrationFileName.FindStringSubmatch(name)
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("baton: migration file %q: the name must look like 0001_some_title.up.sql", name)
		}
		version, _ := strconv.Atoi(m[1]) // four digits: cannot fail
		if want := len(ms) + 1; version != want {
			return nil, fmt.Errorf("baton: migration file %q: version %d, want %d (versions start at 1 and have no gaps or duplicates)", name, version, want)
		}
		body, err := fs.ReadFile(fsys, dir+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("baton: read migration file %q: %w", name, err)
		}
		text := string(body)
		if first, _, _ := strings.Cut(text, "\n"); strings.TrimRight(first, " \r") != gooseUp {
			return nil, fmt.Errorf("baton: migration file %q: the first line must be %q so goose accepts the file", name, gooseUp)
		}
		if !strings.HasSuffix(strings.TrimSpace(text), ";") {
			return nil, fmt.Errorf("baton: migration file %q: the file must end with a statement's closing semicolon (goose splits on them, and SchemaSQL appends to the file)", name)
		}
		ms = append(ms, migration{Version: version, Title: m[2], File: name, SQL: text})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("baton: no migration files in %q", dir)
	}
	return ms, nil
}

// ddl is one statement of a migration file, comments removed, in the
// order the files run them.
type ddl struct {
	pos     int
	sql     string
	version int // of the migration it is part of
}

// statements are the statements of every migration, in order: the source
// of the statements Migrate repairs with and the errors print.
var statements = splitStatements(migrations)

// splitStatements cuts the files into statements the way goose does: at
// the semicolons that end lines, except inside a StatementBegin and
// StatementEnd block, which is one statement. Comment lines are dropped.
func splitStatements(ms []migration) []ddl {
	var out []ddl
	var version int
	emit := func(s string) {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			out = append(out, ddl{pos: len(out), sql: strings.TrimSuffix(s, ";"), version: version})
		}
	}
	for _, m := range ms {
		version = m.Version
		var cur strings.Builder
		block := false
		for line := range strings.Lines(m.SQL) {
			switch trimmed := strings.TrimSpace(line); {
			case trimmed == "-- +goose StatementBegin":
				block = true
			case trimmed == "-- +goose StatementEnd":
				block = false
				emit(cur.String())
				cur.Reset()
			case strings.HasPrefix(trimmed, "--"):
			default:
				cur.WriteString(line)
				if !block && strings.HasSuffix(trimmed, ";") {
					emit(cur.String())
					cur.Reset()
				}
			}
		}
		emit(cur.String())
	}
	return out
}

// statement returns the first statement matching the pattern, with
// name quoted for a regular expression in place of %s.
func statement(pattern, name string) (ddl, bool) {
	re := regexp.MustCompile(fmt.Sprintf(pattern, regexp.QuoteMeta(name)))
	for _, s := range statements {
		if re.MatchString(s.sql) {
			return s, true
		}
	}
	return ddl{}, false
}

// tableStatements are the statements that make a table: the CREATE TABLE,
// the columns later migrations add, its indexes, and a sequence made its
// column's.
func tableStatements(table string) []ddl {
	var out []ddl
	for _, pattern := range []string{`^CREATE (UNLOGGED )?TABLE %s \(`, `^ALTER TABLE %s ADD COLUMN `,
		`^CREATE (UNIQUE )?INDEX \w+ ON %s `, `^ALTER SEQUENCE \w+ OWNED BY %s\.`} {
		re := regexp.MustCompile(fmt.Sprintf(pattern, regexp.QuoteMeta(table)))
		for _, s := range statements {
			if re.MatchString(s.sql) {
				out = append(out, s)
			}
		}
	}
	return out
}

// addColumn matches a migration's ALTER TABLE that adds a column; the
// definition follows it.
var addColumn = regexp.MustCompile(`^ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?`)

// columnDefinition is the column's definition in its table's CREATE TABLE
// statement ("holder_address text NOT NULL DEFAULT ”"), or in the ALTER
// TABLE ... ADD COLUMN of the migration that added it, or "".
func columnDefinition(table, column string) string {
	for _, s := range statements {
		if m := addColumn.FindStringSubmatch(s.sql); m != nil && m[1] == table {
			if def := s.sql[len(m[0]):]; strings.HasPrefix(def, column+" ") {
				return def
			}
		}
	}
	create, ok := statement(`^CREATE (UNLOGGED )?TABLE %s \(`, table)
	if !ok {
		return ""
	}
	body := create.sql[strings.Index(create.sql, "(")+1 : strings.LastIndex(create.sql, ")")]
	depth, start := 0, 0
	for i := 0; i <= len(body); i++ {
		if i < len(body) {
			switch body[i] {
			case '(':
				depth++
				continue
			case ')':
				depth--
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		def := strings.TrimSpace(body[start:i])
		if name, _, _ := strings.Cut(def, " "); name == column {
			return def
		}
		start = i + 1
	}
	return ""
}

// Migrations returns the migration files, at the root of the returned file
// system, for running them with a migration tool instead of Migrate:
// golang-migrate's iofs source (iofs.New(pgxstore.Migrations(), ".")) or
// goose (goose.NewProvider with this file system). Every file is named
// NNNN_title.up.sql and starts with "-- +goose Up"; none names a schema, so
// the tables land in the connection's search_path.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFS, migrationsDir)
	if err != nil { // cannot happen: the directory name is a valid constant
		panic(err)
	}
	return sub
}

// MigrationsTable is the table, in the target schema, where Migrate records
// applied versions.
const MigrationsTable = "baton_schema_migrations"

// migrationsTable is MigrationsTable, as this package's code names it.
const migrationsTable = MigrationsTable

// Versions are the versions of the migrations this binary knows, in order.
func Versions() []int {
	vs := make([]int, len(migrations))
	for i, m := range migrations {
		vs[i] = m.Version
	}
	return vs
}

// MigrationInfo names one migration this binary knows.
type MigrationInfo struct {
	Version int
	Name    string // the title in its file name, as Migrate records it
}

// Known lists the migrations this binary knows, in version order.
func Known() []MigrationInfo {
	out := make([]MigrationInfo, len(migrations))
	for i, m := range migrations {
		out[i] = MigrationInfo{Version: m.Version, Name: m.Title}
	}
	return out
}

// Tables are the tables the migrations make, in the order they make them,
// without the version table.
func Tables() []string {
	names := make([]string, len(expectedShape))
	for i, t := range expectedShape {
		names[i] = t.Name
	}
	return names
}

// migrationsTableDDL creates the version table under the given (already
// quoted) name. It is the same for Migrate and SchemaSQL so both leave the
// same bookkeeping behind.
func migrationsTableDDL(quotedName string) string {
	return "CREATE TABLE IF NOT EXISTS " + quotedName + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
}

// SchemaSQL returns the whole current schema as one SQL script: every
// migration in order, each under a header comment, plus the rows Migrate
// would record in baton_schema_migrations, so Migrate later finds nothing to
// do. Like the migration files it names no schema: the objects are created in
// the first schema of search_path. Run it in one transaction, for example:
//
//	PGOPTIONS='-c search_path=baton' psql -v ON_ERROR_STOP=1 --single-transaction -f baton.sql
func SchemaSQL() string {
	sql, _ := SchemaSQLFrom(0) // version 0 is always valid
	return sql
}

// SchemaSQLFrom is SchemaSQL for a schema already at version from: only
// the migrations after it, with their rows, and the version table made
// only if it is missing. From 0 it is the whole schema; from the latest
// version, a script that does nothing. A version this binary does not know
// is an error.
func SchemaSQLFrom(from int) (string, error) {
	if from < 0 || from > latestVersion {
		return "", fmt.Errorf("baton: no migration version %d: this binary knows versions 0 (an empty schema) to %d", from, latestVersion)
	}
	var b strings.Builder
	if from == 0 {
		fmt.Fprintf(&b, "-- baton PostgreSQL schema, migration version %d.\n", latestVersion)
	} else {
		fmt.Fprintf(&b, "-- baton PostgreSQL schema, upgrade from migration version %d to %d.\n", from, latestVersion)
	}
	b.WriteString("--\n")
	b.WriteString("-- Creates baton's tables in the first schema of search_path and records the\n")
	b.WriteString("-- applied versions in " + migrationsTable + ", so that a later\n")
	b.WriteString("-- pgxstore.Migrate finds nothing to do. Run it once, in one transaction:\n")
	b.WriteString("--   PGOPTIONS='-c search_path=baton' psql -v ON_ERROR_STOP=1 --single-transaction -f baton.sql\n")
	b.WriteString("\n")
	b.WriteString(migrationsTableDDL(migrationsTable))
	b.WriteString(";\n")
	for _, m := range migrations[from:] { // versions run 1, 2, 3, ...: migrations[i] is version i+1
		fmt.Fprintf(&b, "\n-- Migration %04d: %s (%s)\n", m.Version, m.Title, m.File)
		body := strings.TrimPrefix(m.SQL, gooseUp)
		body = strings.TrimLeft(body, " \r\n")
		body = strings.TrimRight(body, " \t\r\n")
		b.WriteString(body)
		b.WriteString("\n")
		b.WriteString(m.record())
		b.WriteString(";\n")
	}
	return b.String(), nil
}

// record is the statement that records m as applied in the version table
// of the search_path's first schema.
func (m migration) record() string {
	// The title matches [a-z0-9_]+ (checked at load), so it needs no
	// escaping inside the string literal.
	return fmt.Sprintf("INSERT INTO %s (version, name) VALUES (%d, '%s')", migrationsTable, m.Version, m.Title)
}
