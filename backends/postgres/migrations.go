package postgres

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
		return nil, fmt.Errorf("baton/postgres: read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries { // fs.ReadDir sorts by name, hence by version
		name := e.Name()
		m := migrationFileName.FindStringSubmatch(name)
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("baton/postgres: migration file %q: the name must look like 0001_some_title.up.sql", name)
		}
		version, _ := strconv.Atoi(m[1]) // four digits: cannot fail
		if want := len(ms) + 1; version != want {
			return nil, fmt.Errorf("baton/postgres: migration file %q: version %d, want %d (versions start at 1 and have no gaps or duplicates)", name, version, want)
		}
		body, err := fs.ReadFile(fsys, dir+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("baton/postgres: read migration file %q: %w", name, err)
		}
		text := string(body)
		if first, _, _ := strings.Cut(text, "\n"); strings.TrimRight(first, " \r") != gooseUp {
			return nil, fmt.Errorf("baton/postgres: migration file %q: the first line must be %q so goose accepts the file", name, gooseUp)
		}
		if !strings.HasSuffix(strings.TrimSpace(text), ";") {
			return nil, fmt.Errorf("baton/postgres: migration file %q: the file must end with a statement's closing semicolon (goose splits on them, and SchemaSQL appends to the file)", name)
		}
		ms = append(ms, migration{Version: version, Title: m[2], File: name, SQL: text})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("baton/postgres: no migration files in %q", dir)
	}
	return ms, nil
}

// Migrations returns the migration files, at the root of the returned file
// system, for running them with a migration tool instead of Migrate:
// golang-migrate's iofs source (iofs.New(postgres.Migrations(), ".")) or
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

// migrationsTable is the table, in the target schema, where Migrate records
// applied versions.
const migrationsTable = "baton_schema_migrations"

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
	var b strings.Builder
	fmt.Fprintf(&b, "-- baton PostgreSQL schema, migration version %d.\n", latestVersion)
	b.WriteString("--\n")
	b.WriteString("-- Creates baton's tables in the first schema of search_path and records the\n")
	b.WriteString("-- applied versions in " + migrationsTable + ", so that a later\n")
	b.WriteString("-- postgres.Migrate finds nothing to do. Run it once, in one transaction:\n")
	b.WriteString("--   PGOPTIONS='-c search_path=baton' psql -v ON_ERROR_STOP=1 --single-transaction -f baton.sql\n")
	b.WriteString("\n")
	b.WriteString(migrationsTableDDL(migrationsTable))
	b.WriteString(";\n")
	for _, m := range migrations {
		fmt.Fprintf(&b, "\n-- Migration %04d: %s (%s)\n", m.Version, m.Title, m.File)
		body := strings.TrimPrefix(m.SQL, gooseUp)
		body = strings.TrimLeft(body, " \r\n")
		body = strings.TrimRight(body, " \t\r\n")
		b.WriteString(body)
		b.WriteString("\n")
		// The title matches [a-z0-9_]+ (checked at load), so it needs no
		// escaping inside the string literal.
		fmt.Fprintf(&b, "INSERT INTO %s (version, name) VALUES (%d, '%s');\n", migrationsTable, m.Version, m.Title)
	}
	return b.String()
}
