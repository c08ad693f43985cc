package mailer

// LockHolders is how many requests hold or wait for key's lock: a test
// waits for it to reach 2 to know a second request is queued behind the
// first, without sleeping.
func LockHolders(s *Server, key string) int {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	if l := s.locks.locks[key]; l != nil {
		return l.refs
	}
	return 0
}
