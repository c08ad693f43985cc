package journal

import (
	"context"
	"sync"
)

// KeyLocks serialises a provider's requests per idempotency key while
// letting different keys run in parallel. A waiter gives up when its
// request's context ends, so a client that hangs up does not leave a
// goroutine queued behind a held-back answer. The zero value is ready to
// use.
type KeyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	token chan struct{} // holds one token when the key is free
	refs  int           // holders and waiters; the entry is dropped at 0
}

// Lock waits for key and returns the function that frees it, or ctx's
// error if ctx ends first.
func (k *KeyLocks) Lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
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

func (k *KeyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

// Holders returns how many requests hold or wait for key's lock. A test
// waits for it to reach 2 to know that a second request is queued behind
// the first, without sleeping.
func (k *KeyLocks) Holders(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.locks[key]; l != nil {
		return l.refs
	}
	return 0
}
