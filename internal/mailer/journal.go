package mailer

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

// journal is the append-only file of messages, one JSON object per line:
// the gateway's journal (internal/gateway/journal.go), with a message for
// a record.
//
// A message counts once its whole line, newline included, is fsynced: only
// then is the answer sent. So a last line cut short by a crash was never
// acknowledged to anyone, and dropping it at start breaks no promise. A bad
// line anywhere else is damage, not a crash, and the mailer refuses to
// start rather than forget what a key sent.
type journal struct {
	f   *os.File
	err error // once set, every append fails with it
}

var errJournalClosed = errors.New("journal closed")

// openJournal opens (or creates) the journal at path, replays every message
// into apply, and cuts off a torn last line so the next append starts on a
// line of its own.
func openJournal(path string, apply func(Message), logger *slog.Logger) (*journal, error) {
	if err := makeDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	j, err := recoverJournal(f, apply, logger)
	if err != nil {
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

func recoverJournal(f *os.File, apply func(Message), logger *slog.Logger) (*journal, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	good, n, err := replay(data, apply)
	if err != nil {
		return nil, err
	}
	if good < len(data) {
		logger.Warn("mailer journal: ignoring a torn last line",
			"path", f.Name(), "line", n+1, "bytes", len(data)-good)
		if err := f.Truncate(int64(good)); err != nil {
			return nil, fmt.Errorf("truncate torn line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("sync: %w", err)
		}
	}
	logger.Info("mailer journal replayed", "path", f.Name(), "messages", n)
	return &journal{f: f}, nil
}

// replay applies the messages in data in order. It returns the length of
// the prefix that holds whole lines and how many there were; whatever
// follows is a torn last line.
func replay(data []byte, apply func(Message)) (good, n int, err error) {
	for good < len(data) {
		end := bytes.IndexByte(data[good:], '\n')
		if end < 0 {
			return good, n, nil // no newline: the write never finished
		}
		line := data[good : good+end]
		var m Message
		if err := json.Unmarshal(line, &m); err != nil {
			if good+end+1 == len(data) {
				return good, n, nil // the last write, damaged by the crash
			}
			return 0, 0, fmt.Errorf("line %d: %w", n+1, err)
		}
		if err := m.check(); err != nil {
			return 0, 0, fmt.Errorf("line %d: %w", n+1, err)
		}
		apply(m)
		n++
		good += end + 1
	}
	return good, n, nil
}

// append writes m as one line and fsyncs it. After a failed write the
// file may end in a partial line, so the journal stops taking messages:
// the next start cuts that line off.
func (j *journal) append(m Message) error {
	if j.err != nil {
		return j.err
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	line, err := json.Marshal(m)
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
	return nil
}

func (j *journal) close() error {
	if errors.Is(j.err, errJournalClosed) {
		return nil
	}
	j.err = errJournalClosed
	return j.f.Close()
}

// makeDir creates the journal's directory when it is missing (the default
// path starts out without one), readable by the mailer's user only, like
// the file, and makes its entry durable: a journal whose directory a crash
// forgot would be forgotten with it.
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
