package files

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres keeps files in the stored_files table of the service's own
// database: nothing more to run, and every instance sees every file.
type Postgres struct{ Pool *pgxpool.Pool }

// listPage is how many names one query of List reads.
const listPage = 1000

func (p Postgres) Put(ctx context.Context, o Object) error {
	tag, err := p.Pool.Exec(ctx, `INSERT INTO stored_files (name, owner, size, sha256, data) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO NOTHING`, o.Name, ownerOf(o.Name), int64(len(o.Data)), o.SHA256[:], o.Data)
	if err != nil {
		return fmt.Errorf("files: store %s: %w", o.Name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var sum []byte
	if err := p.Pool.QueryRow(ctx, `SELECT sha256 FROM stored_files WHERE name = $1`, o.Name).Scan(&sum); err != nil {
		return fmt.Errorf("files: store %s: %w", o.Name, err)
	}
	if string(sum) != string(o.SHA256[:]) {
		return fmt.Errorf("%w: %s", ErrExists, o.Name)
	}
	return nil
}

func (p Postgres) Get(ctx context.Context, name string) (Object, error) {
	o := Object{Info: Info{Name: name}}
	var sum []byte
	err := p.Pool.QueryRow(ctx, `SELECT size, sha256, data, created_at FROM stored_files WHERE name = $1`, name).
		Scan(&o.Size, &sum, &o.Data, &o.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return Object{}, ErrNotFound
	}
	if err != nil {
		return Object{}, fmt.Errorf("files: read %s: %w", name, err)
	}
	copy(o.SHA256[:], sum)
	return o, nil
}

func (p Postgres) Delete(ctx context.Context, name string) (int64, error) {
	var size int64
	err := p.Pool.QueryRow(ctx, `DELETE FROM stored_files WHERE name = $1 RETURNING size`, name).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("files: delete %s: %w", name, err)
	}
	return size, nil
}

func (p Postgres) Usage(ctx context.Context, owner string) (int64, error) {
	var n int64
	if err := p.Pool.QueryRow(ctx, `SELECT coalesce(sum(size), 0)::bigint FROM stored_files WHERE owner = $1`, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("files: usage: %w", err)
	}
	return n, nil
}

// List reads a page of names at a time (no transaction held while fn
// runs, so fn may delete what it is given).
func (p Postgres) List(ctx context.Context, fn func(Info) error) error {
	after := ""
	for {
		rows, err := p.Pool.Query(ctx, `SELECT name, size, created_at FROM stored_files WHERE name > $1 ORDER BY name LIMIT $2`, after, listPage)
		if err != nil {
			return fmt.Errorf("files: list: %w", err)
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Info, error) {
			var i Info
			err := r.Scan(&i.Name, &i.Size, &i.Created)
			return i, err
		})
		if err != nil {
			return fmt.Errorf("files: list: %w", err)
		}
		for _, i := range page {
			if err := fn(i); err != nil {
				return err
			}
		}
		if len(page) < listPage {
			return nil
		}
		after = page[len(page)-1].Name
	}
}
