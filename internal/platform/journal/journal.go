package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Journal is the append-only file of a provider's records R, one JSON
// object per line (see the package comment).
type Journal[R any] struct {
	f     *os.File
	check func(R) error
	apply func(R)
	err   error // once set, every append fails with it
}

// Options configure a Journal.
type Options[R any] struct {
	// Name is whose journal it is ("gateway", "mailer"), for the log.
	Name string
	// Check reports whether Apply can use a record; required. Append
	// refuses to write a record that fails it, and Open refuses to start
	// from one.
	Check func(R) error
	// Apply adds one checked record to the provider's index; required. It
	// is the index's only writer, called for every record Open replays and
	// every record Append writes.
	Apply  func(R)
	Logger *slog.Logger // nil: slog.Default()
}

var errClosed = errors.New("journal closed")

// Open opens (or creates) the journal at path, replays every record into
// opts.Apply, and cuts off a torn last line so the next append starts on
// a line of its own.
func Open[R any](path string, opts Options[R]) (*Journal[R], error) {
	if opts.Check == nil || opts.Apply == nil {
		return nil, errors.New("journal: Check and Apply are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := makeDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	j := &Journal[R]{f: f, check: opts.Check, apply: opts.Apply}
	if err := j.recover(opts.Name, opts.Logger); err != nil {
		f.Close() //nolint:errcheck // the replay error is the one to report
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	// The file may be new: its directory entry must be durable too.
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close() //nolint:errcheck
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	return j, nil
}

func (j *Journal[R]) recover(name string, logger *slog.Logger) error {
	data, err := io.ReadAll(j.f)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	good, n, err := j.replay(data)
	if err != nil {
		return err
	}
	if good < len(data) {
		logger.Warn(name+" journal: ignoring a torn last line",
			"path", j.f.Name(), "line", n+1, "bytes", len(data)-good)
		if err := j.f.Truncate(int64(good)); err != nil {
			return fmt.Errorf("truncate torn line: %w", err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
	}
	logger.Info(name+" journal replayed", "path", j.f.Name(), "records", n)
	return nil
}

// replay applies the records in data in order. It returns the length of
// the prefix that holds whole records and how many there were; whatever
// follows is a torn last line.
func (j *Journal[R]) replay(data []byte) (good, n int, err error) {
	for good < len(data) {
		end := bytes.IndexByte(data[good:], '\n')
		if end < 0 {
			return good, n, nil // no newline: the write never finished
		}
		line := data[good : good+end]
		var rec R
		if err := json.Unmarshal(line, &rec); err != nil {
			if good+end+1 == len(data) {
				return good, n, nil // the last write, damaged by the crash
			}
			return 0, 0, fmt.Errorf("line %d: %w", n+1, err)
		}
		if err := j.check(rec); err != nil {
			return 0, 0, fmt.Errorf("line %d: %w", n+1, err)
		}
		j.apply(rec)
		n++
		good += end + 1
	}
	return good, n, nil
}

// Append writes rec as one line, fsyncs it, and only then applies it to
// the index. After a failed write the file may end in a partial line, so
// the journal stops taking records: the next start cuts that line off.
func (j *Journal[R]) Append(rec R) error {
	if j.err != nil {
		return j.err
	}
	if err := j.check(rec); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	if _, err := j.f.Write(append(line, '\n')); err != nil {
		j.err = fmt.Errorf("journal: write: %w", err)
		return j.err
	}
	if err := j.f.Sync(); err != nil {
		j.err = fmt.Errorf("journal: sync: %w", err)
		return j.err
	}
	j.apply(rec)
	return nil
}

// Close closes the file; every Append from now on fails. Closing twice is
// not an error.
func (j *Journal[R]) Close() error {
	if errors.Is(j.err, errClosed) {
		return nil
	}
	j.err = errClosed
	return j.f.Close()
}

// makeDir creates the journal's directory when it is missing (a default
// path such as data/gateway-journal.jsonl starts out without one),
// readable by the provider's user only, like the file, and makes its entry
// durable: a journal whose directory a crash forgot would be forgotten
// with it.
func makeDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create dir: %w", err)
	}
	return syncDir(filepath.Dir(dir))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer d.Close() //nolint:errcheck
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
}
