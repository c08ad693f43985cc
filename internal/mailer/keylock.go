package mailer

import (
	"context"
	"sync"
)

// keyLocks serialises requests per idempotency key while letting different
// keys run in parallel. A waiter gives up when its request's context ends,
// so a client that hangs up does not leave a goroutine queued behind a
// held-back answer. (The same lock as the gateway's.)
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	token chan struct{} // holds one token when the key is free
	refs  int           // holders and waiters; the entry is dropped at 0
}

func newKeyLocks() *keyLocks {
	return &keyLocks{locks: map[string]*keyLock{}}
}

// lock waits for key and returns the function that frees it.
func (k *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &keyLock{token: make(chan struct{}, 1)}
		l.token <- struct{}{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	select {
	case <-l.token:
		return func() {
			l.token <- struct{}{}
			k.release(key, l)
		}, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
}

func (k *keyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}
